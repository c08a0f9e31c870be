"""PostgreSQL storage vs the default SQLite storage vs LangGraph's ``PostgresStore``, same data, same run.

    python benchmarks/postgres_bench.py [--quick] [--sizes 100000,1000000] [--turns 200] [--queries 3]

Starts its own throwaway PostgreSQL cluster (``ironmem.testing.postgres``; fsync on, ``synchronous_commit=off``
so that neither database flushes the disk on every commit: SQLite runs WAL with ``synchronous=NORMAL``). For each
history size the same generated turns (``corpus.turn_rows``) are loaded into:

- **ironmem SQLite** (the default storage: FTS5, ``SearchIndex.add_turns``);
- **ironmem PostgreSQL** (``PostgresStorage``; bulk load with COPY);
- **LangGraph PostgresStore** (``langgraph-checkpoint-postgres``; one item per turn, ``store.batch`` of
  ``PutOp``). This machine has no pgvector, so the store runs without an index: ``search(namespace, query=...)``
  then ignores the query and returns the newest items of the namespace. It is the floor of "ask the store for
  something" on the same table size, not a relevance peer; listed as such.

Measured per size:

- ``session_search`` p50 / p95 over the shared English and Chinese queries (``corpus.EN_QUERIES`` /
  ``ZH_QUERIES``), ``limit=5``; LangGraph: ``store.search(("turns",), query=q, limit=5)``.
- per-turn overhead p50 / p95: ``session.prefetch(user)`` + ``recall.fenced()`` + ``session.sync_turn(...)`` for
  ironmem; ``store.search(...)`` + ``store.put(...)`` for LangGraph.

Results: a table on stdout and ``benchmarks/results/postgres_bench.json``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _util import fmt_ms, metadata, summary_ms, table, write_json
from corpus import EN_QUERIES, ZH_QUERIES, Corpus, turn_rows

SIZES, QUICK_SIZES = [100_000], [10_000]
TURNS, QUICK_TURNS = 200, 60


def _timed(fn: Callable[[], Any], n: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    gc.disable()
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return out


def _search_times(search: Callable[[str], Any], rounds: int, before: Callable[[], Any] | None = None) -> list[float]:
    queries = EN_QUERIES + ZH_QUERIES
    for q in queries:
        search(q)
    out = []
    for _ in range(rounds):
        for q in queries:
            if before is not None:
                before()
            t0 = time.perf_counter()
            search(q)
            out.append(time.perf_counter() - t0)
    return out


def _turn_loop(manager: Any, turns: int, seed: int) -> list[float]:
    corpus = Corpus(seed=seed)
    session = manager.start_session(f"bench-live-{seed}")
    out = []
    for i in range(turns + 3):
        user, assistant = corpus.turn()
        t0 = time.perf_counter()
        session.prefetch(user).fenced()
        session.sync_turn(user, assistant)
        elapsed = time.perf_counter() - t0
        if i >= 3:
            out.append(elapsed)
    session.end()
    return out


def run_size(cluster: Any, n: int, turns: int, rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    from ironmem import MemoryManager
    from ironmem.core.builtin.postgres import PostgresStorage

    rows = list(turn_rows(n, seed=3))
    result: dict[str, Any] = {"turns": n}
    work = Path(tempfile.mkdtemp(prefix="ironmem-pgbench-"))
    try:
        # -- ironmem on SQLite --
        t0 = time.perf_counter()
        sqlite = MemoryManager(home=work / "sqlite")
        sqlite.builtin.index.add_turns(rows)
        result["load_s_sqlite"] = round(time.perf_counter() - t0, 1)
        log(f"  {n:,} turns loaded into SQLite in {result['load_s_sqlite']} s")
        result["search_sqlite"] = summary_ms(_search_times(
            lambda q: sqlite.builtin.index.search(q, limit=5, drop_stopwords=False), rounds))
        # Cold: SearchIndex keeps candidate lists in process memory between searches; PostgresIndex cannot
        # (see postgres.py), so the cold figure is the like-for-like one.
        result["search_sqlite_cold"] = summary_ms(_search_times(
            lambda q: sqlite.builtin.index.search(q, limit=5, drop_stopwords=False), rounds,
            before=sqlite.builtin.index.clear_caches))
        result["turn_sqlite"] = summary_ms(_turn_loop(sqlite, turns, seed=11))
        sqlite.close()

        # -- ironmem on PostgreSQL --
        url = cluster.create_database(f"ironmem_{n}")
        t0 = time.perf_counter()
        storage = PostgresStorage(url)
        storage.index.add_turns(rows)
        result["load_s_postgres"] = round(time.perf_counter() - t0, 1)
        log(f"  {n:,} turns loaded into PostgreSQL (COPY) in {result['load_s_postgres']} s")
        pg = MemoryManager(home=work / "pg", storage=storage)
        result["search_postgres"] = summary_ms(_search_times(
            lambda q: pg.builtin.index.search(q, limit=5, drop_stopwords=False), rounds))
        result["turn_postgres"] = summary_ms(_turn_loop(pg, turns, seed=11))
        pg.close()

        # -- LangGraph PostgresStore --
        try:
            from langgraph.store.base import PutOp
            from langgraph.store.postgres import PostgresStore
        except ImportError as exc:
            result["langgraph"] = f"not installed ({exc}); pip install langgraph-checkpoint-postgres"
            return result
        lg_url = cluster.create_database(f"langgraph_{n}")
        with PostgresStore.from_conn_string(lg_url) as store:
            store.setup()
            t0 = time.perf_counter()
            ns = ("turns",)
            for start in range(0, n, 2000):
                store.batch([PutOp(ns, str(i), {"session": r[0], "user": r[3], "assistant": r[4]}, index=False)
                             for i, r in enumerate(rows[start:start + 2000], start)])
            result["load_s_langgraph"] = round(time.perf_counter() - t0, 1)
            log(f"  {n:,} items loaded into LangGraph PostgresStore in {result['load_s_langgraph']} s")
            result["search_langgraph"] = summary_ms(_search_times(lambda q: store.search(ns, query=q, limit=5),
                                                                  rounds))
            corpus = Corpus(seed=11)
            counter = [n]

            def lg_turn() -> None:
                user, assistant = corpus.turn()
                store.search(ns, query=user, limit=3)
                counter[0] += 1
                store.put(ns, str(counter[0]), {"session": "live", "user": user, "assistant": assistant}, index=False)

            result["turn_langgraph"] = summary_ms(_timed(lg_turn, turns))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k turns, fewer timed turns")
    ap.add_argument("--sizes", help="comma-separated history sizes (default 100000; add 1000000 for 1M)")
    ap.add_argument("--turns", type=int, help="timed turns per system and size")
    ap.add_argument("--queries", type=int, default=3, help="rounds over the query list")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (QUICK_SIZES if args.quick else SIZES)
    turns = args.turns or (QUICK_TURNS if args.quick else TURNS)

    from ironmem.testing.postgres import PostgresCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"postgres_bench skipped: {reason}")
        write_json("postgres_bench", {"benchmark": "postgres_bench", **metadata(args.quick), "skipped": reason})
        return 0
    results = []
    with PostgresCluster(fast=False, settings={"synchronous_commit": "off", "shared_buffers": "256MB",
                                               "maintenance_work_mem": "256MB"}) as cluster:
        for n in sizes:
            print(f"== {n:,} turns", flush=True)
            results.append(run_size(cluster, n, turns, args.queries, lambda m: print(m, flush=True)))
    rows = []
    for r in results:
        for system, key in (("ironmem SQLite (warm candidate cache)", "sqlite"),
                            ("ironmem SQLite (cold: cache cleared per search)", "sqlite_cold"),
                            ("ironmem PostgreSQL", "postgres"),
                            ("LangGraph PostgresStore (no vector index: query ignored)", "langgraph")):
            s, t = r.get(f"search_{key}"), r.get(f"turn_{key}")
            if not isinstance(s, dict):
                continue
            rows.append([f"{r['turns']:,}", system, f"{fmt_ms(s['p50_ms'])} / {fmt_ms(s['p95_ms'])}",
                         f"{fmt_ms(t['p50_ms'])} / {fmt_ms(t['p95_ms'])}" if isinstance(t, dict) else "-",
                         f"{r[f'load_s_{key}']} s" if f"load_s_{key}" in r else "-"])
    text = table(["stored turns", "system", "session_search p50 / p95 ms", "per turn p50 / p95 ms", "load"], rows)
    print(text)
    path = write_json("postgres_bench", {"benchmark": "postgres_bench", **metadata(args.quick), "results": results,
                                         "table": text})
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
