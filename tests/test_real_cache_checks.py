"""The real-cache benchmark's target checks (``benchmarks/real_cache.py``), on hand-made measurements: no model.

The rewrite target is on every turn whose memory block the strategy re-rendered differently; a turn whose system
prompt came out byte-identical to the previous turn's is listed apart (any prefix cache re-uses it) and cannot
pass the check on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import real_cache


def _turn(n: int, prompt: int, evaluated: int, unchanged: bool) -> dict[str, Any]:
    return {"turn": n, "prompt_tokens": prompt, "evaluated": evaluated, "predicted": evaluated,
            "evaluated_share": evaluated / prompt, "system_unchanged": unchanged,
            "requests": [{"prompt_tokens": prompt, "evaluated": evaluated}]}


def _doc(turns: list[dict[str, Any]]) -> dict[str, Any]:
    shares = [t["evaluated_share"] for t in turns[1:]]
    totals = {"prediction_error": 0.0, "predicted": 1, "evaluated": 1, "min_share_after_first": min(shares),
              "max_share_after_first": max(shares)}
    return {"strategies": {"rewrite_every_turn": {"strategy": "rewrite_every_turn", "turns": turns,
                                                  "totals": totals}}}


def _rewrite_check(doc: dict[str, Any]) -> tuple[bool, str]:
    [(passed, detail)] = [(ok, d) for name, ok, d in real_cache.check(doc) if name.startswith("rewrite_every_turn")]
    return passed, detail


def test_a_byte_identical_re_render_is_listed_apart_not_counted() -> None:
    doc = _doc([_turn(1, 1000, 1000, False), _turn(2, 1000, 980, False), _turn(3, 1000, 6, True),
                _turn(4, 1000, 975, False)])
    passed, detail = _rewrite_check(doc)
    assert passed
    assert "2 of 3 turns" in detail and "byte-identical (re-used by the engine, not a rewrite): 3 (0.6%)" in detail


def test_a_rewritten_turn_under_90_percent_fails() -> None:
    doc = _doc([_turn(1, 1000, 1000, False), _turn(2, 1000, 980, False), _turn(3, 1000, 600, False)])
    passed, detail = _rewrite_check(doc)
    assert not passed and "under 90%: 3 (60.0%)" in detail


def test_measurements_without_the_flag_count_every_turn() -> None:
    turns = [_turn(1, 1000, 1000, False), _turn(2, 1000, 6, False)]
    for t in turns:
        del t["system_unchanged"]
    assert _rewrite_check(_doc(turns))[0] is False


def test_a_session_where_nothing_was_rewritten_does_not_pass() -> None:
    doc = _doc([_turn(1, 1000, 1000, False), _turn(2, 1000, 6, True), _turn(3, 1000, 5, True)])
    assert _rewrite_check(doc)[0] is False
