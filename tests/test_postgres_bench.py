"""The PostgreSQL benchmark runs end to end at a tiny size against a real throwaway cluster (so it cannot rot).

It starts its own cluster (``ironmem.testing.postgres``), grows the histories in place (200 then 400 turns),
measures all three systems and reads the auto_explain plans back from the server log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))


def test_quick_run_measures_every_system_and_reads_the_plans(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from ironmem.testing.postgres import unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"PostgreSQL benchmark skipped: {reason}")
    pytest.importorskip("langgraph.store.postgres")
    import postgres_bench
    from corpus import EN_QUERIES, ZH_QUERIES

    assert postgres_bench.main(["--quick", "--sizes", "400,200", "--turns", "3", "--queries", "1",
                                "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "postgres_bench.json").read_text(encoding="utf-8"))
    assert data["sizes"] == [200, 400]  # ascending: the second size is the first one grown in place
    assert [r["turns"] for r in data["results"]] == [200, 400]
    queries = len(EN_QUERIES) + len(ZH_QUERIES)
    for r in data["results"]:
        assert set(r["search"]) == {"sqlite_cold", "sqlite", "postgres_cold", "postgres", "langgraph"}
        for s in r["search"].values():
            assert s["n"] == queries and s["en"]["n"] == len(EN_QUERIES) and s["zh"]["n"] == len(ZH_QUERIES)
            assert 0 < s["p50_ms"] <= s["p95_ms"] <= s["max_ms"]
        for key in ("sqlite", "postgres"):
            t = r["per_turn"][key]
            assert t["n"] == 3 and 0 < t["turn_index"]["p50_ms"] <= t["p50_ms"]
            assert t["turn_index"]["p95_ms"] <= t["p95_ms"]  # a part of each turn: never above the turn
        assert r["per_turn"]["langgraph"]["n"] == 3
        # each step loads only the turns it adds
        assert all(r["load_s"][k] >= 0 for k in ("sqlite", "postgres", "langgraph", "generate"))
        # auto_explain: every query produced at least one plan on ironmem's turns table, read back from the log
        ex = r["explain"]["ironmem"]
        assert set(ex["slowest"]) == set(EN_QUERIES + ZH_QUERIES)
        assert ex["statements"] >= queries
        assert any("ironmem.turns" in p["plan"] for p in ex["slowest"].values())
        assert all("actual time=" in p["plan"] for p in ex["slowest"].values())
        assert "store" in r["explain"]["langgraph"]["slowest"][EN_QUERIES[0]]["plan"]
    for label in ("ironmem SQLite, cold", "ironmem PostgreSQL, warm", "LangGraph PostgresStore"):
        assert label in data["table"] and label in out
