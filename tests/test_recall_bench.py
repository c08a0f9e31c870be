"""The recall-quality benchmark's dataset and evaluation run end to end (small, lexical methods only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from recall_data import FACTS, generate


def test_dataset_is_deterministic_and_annotated() -> None:
    a, b = generate(conversations=2), generate(conversations=2)
    assert [t.text for t in a[0].turns] == [t.text for t in b[0].turns]
    assert [q.text for q in a[1].questions] == [q.text for q in b[1].questions]
    conv = a[0]
    assert len(conv.questions) == len(FACTS)
    assert {q.qtype for q in conv.questions} == {"single-hop", "multi-hop", "temporal", "preference", "knowledge-update"}
    for q in conv.questions:
        assert q.evidence and all(0 <= e < len(conv.turns) for e in q.evidence)
        if q.qtype == "multi-hop":
            first, second = (conv.turns[e] for e in q.evidence)
            assert first.session < second.session
    stamps = [t.ts for t in conv.turns]
    assert stamps == sorted(stamps)


def test_evaluation_runs_and_reports_every_method_and_type() -> None:
    pytest.importorskip("bm25s")
    from recall_quality import KS, evaluate

    report = evaluate(generate(conversations=1, sessions=4, turns_per_session=10), dense_ok=False, log_every=False)
    assert report["methods"] == ["prefetch", "session_search", "bm25s"]
    for method in report["methods"]:
        row = report["results"][method]["all"]
        assert row["n"] == len(FACTS)
        assert all(0.0 <= row[f"recall@{k}"] <= 1.0 for k in KS)
        assert row["recall@3"] <= row["recall@5"] <= row["recall@10"] or method == "prefetch"
    # the lexical methods find the keyword questions' evidence most of the time
    assert report["results"]["session_search"]["all"]["recall@10"] > 0.3
