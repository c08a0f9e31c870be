"""PostgreSQL storage vs the default SQLite storage vs LangGraph's ``PostgresStore``, same data, same run.

    python benchmarks/postgres_bench.py [--quick] [--sizes 100000,1000000] [--turns 200] [--queries 3]
                                        [--no-explain] [--out-dir DIR]

Starts its own throwaway PostgreSQL cluster (``ironmem.testing.postgres``; fsync on, ``synchronous_commit=off``
so that neither database flushes the disk on every commit: SQLite runs WAL with ``synchronous=NORMAL``).

Loading (setup, not measured as overhead; its time is reported). The turns come from one stream,
``corpus.turn_rows(seed=3)``, generated once and fanned out in chunks of ``CHUNK`` rows to three sinks, so
memory stays bounded and the three systems hold the same turns in the same order:

- **ironmem SQLite** (the default storage): ``SearchIndex.add_turns`` of a ``MemoryManager`` (its own schema,
  FTS5 index; one transaction per chunk);
- **ironmem PostgreSQL** (``PostgresStorage``): ``PostgresIndex.add_turns``, the storage's own bulk path (COPY
  into a temp table, then one ``INSERT ... SELECT`` into ironmem's ``turns`` table with its GIN index; one
  transaction per chunk; ``ANALYZE`` after each call);
- **LangGraph PostgresStore** (``langgraph-checkpoint-postgres``, ``store.setup()`` schema): one item per turn
  under the namespace ``("turns",)``, ``store.batch`` of ``PutOp`` (``BATCH_LG`` items per statement).
  This machine has no pgvector, so the store runs **without an index**: ``search(namespace, query=...)`` then
  ignores the query and returns the namespace's most recently updated items. It is the floor of "ask the store
  for something" on the same table size, not a relevance peer; listed as such.

Sizes grow in place: for ``--sizes 100000,1000000`` the 100k databases are measured, then the next 900k turns
of the same stream are appended and the same databases are measured again (the ~200 live turns per system of the
first round stay in the history). After each load both PostgreSQL databases get ``VACUUM (ANALYZE)`` (what
autovacuum does to a settled table; kept out of the timed figures and reported apart).

Measured per size:

- ``session_search`` p50 / p95 over the fixed query set ``corpus.EN_QUERIES`` + ``corpus.ZH_QUERIES`` (rare
  words such as a project name and an error code, common words such as "coffee" and "python error", two-character
  Chinese words and phrases), ``limit=5``, ``drop_stopwords=False``; ironmem cold (candidate cache cleared before
  every call) and warm (the same queries again, candidate lists cached per process), both backends; LangGraph:
  ``store.search(("turns",), query=q, limit=5)``.
- per-turn overhead p50 / p95 of a real turn: ``session.prefetch(user).fenced()`` + ``session.sync_turn(...)``
  (``prefetch_timeout`` 60 s, so a slow search is measured, not cut off) for ironmem; ``store.search(...)`` +
  ``store.put(...)`` for LangGraph.
- ``explain`` (PostgreSQL, unless ``--no-explain``): the query set once more, cold, on a fresh connection pool
  with ``auto_explain`` (``log_analyze``, ``log_buffers``) switched on for the benchmark databases only, after
  the timed part; every statement's plan is read back from the server log, sequential scans are flagged, and the
  slowest statement of each query is kept in the JSON.

Results: a table on stdout and ``benchmarks/results/postgres_bench.json`` (``--out-dir`` to write elsewhere).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _util import RESULTS, fmt_ms, fmt_ratio, metadata, summary_ms, table, write_json
from corpus import EN_QUERIES, ZH_QUERIES, Corpus, turn_rows

SIZES, QUICK_SIZES = [100_000, 1_000_000], [10_000]
TURNS, QUICK_TURNS = 100, 30
CHUNK = 50_000
BATCH_LG = 2_000
NS = ("turns",)
SYSTEMS = (  # (key, label)
    ("sqlite_cold", "ironmem SQLite, cold (candidate cache cleared per search)"),
    ("sqlite", "ironmem SQLite, warm (candidate cache kept)"),
    ("postgres_cold", "ironmem PostgreSQL, cold (candidate cache cleared per search)"),
    ("postgres", "ironmem PostgreSQL, warm (candidate cache kept)"),
    ("langgraph", "LangGraph PostgresStore, no index (query ignored)"),
)
Row = tuple[str, "str | None", float, str, str]


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


def _search_times(search: Callable[[str], Any], rounds: int,
                  before: Callable[[], Any] | None = None) -> dict[str, list[float]]:
    """Per language, the times of ``rounds`` passes over the query set (after one untimed pass)."""
    for q in EN_QUERIES + ZH_QUERIES:
        search(q)
    out: dict[str, list[float]] = {"en": [], "zh": []}
    for _ in range(rounds):
        for lang, q in [("en", q) for q in EN_QUERIES] + [("zh", q) for q in ZH_QUERIES]:
            if before is not None:
                before()
            t0 = time.perf_counter()
            search(q)
            out[lang].append(time.perf_counter() - t0)
    return out


def _search_summary(times: dict[str, list[float]]) -> dict[str, Any]:
    return {**summary_ms(times["en"] + times["zh"]), "en": summary_ms(times["en"]), "zh": summary_ms(times["zh"])}


def _turn_loop(manager: Any, turns: int, seed: int) -> tuple[list[float], list[float]]:
    """Per timed turn: the whole turn, and the part spent in the turn index (``search`` + ``add_turn``, the calls
    whose cost grows with the history and differs between backends; the rest, e.g. scanning recalled text, is
    the same code on both)."""
    index = manager.builtin.index
    spent = [0.0]

    def timing(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0
        return call

    index.search, index.add_turn = timing(index.search), timing(index.add_turn)
    corpus = Corpus(seed=seed)
    session = manager.start_session(f"bench-live-{seed}")
    total, in_index = [], []
    try:
        for i in range(turns + 3):
            user, assistant = corpus.turn()
            spent[0] = 0.0
            t0 = time.perf_counter()
            session.prefetch(user).fenced()
            session.sync_turn(user, assistant)
            elapsed = time.perf_counter() - t0
            if i >= 3:
                total.append(elapsed)
                in_index.append(spent[0])
        session.end()
    finally:
        del index.search, index.add_turn  # back to the class's methods
    return total, in_index


def _chunks(rows: Iterator[Row], size: int) -> Iterator[list[Row]]:
    while True:
        chunk = list(itertools.islice(rows, size))
        if not chunk:
            return
        yield chunk


def _vacuum(url: str) -> float:
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return time.perf_counter() - t0


def _top_turns(hits: list[Any]) -> list[tuple[str | None, float | None]]:
    return [(h.session_id, h.ts) for h in hits]


class Bench:
    """The three systems over one growing history, in one throwaway cluster."""

    def __init__(self, cluster: Any, work: Path, log: Callable[[str], None], explain: bool) -> None:
        from ironmem import MemoryManager
        from ironmem.core.builtin.postgres import PostgresStorage

        self.cluster, self.work, self.log, self.explain = cluster, work, log, explain
        self.stream: Iterator[Row] = iter(())
        self.loaded = 0
        self.load_s = {"generate": 0.0, "sqlite": 0.0, "postgres": 0.0, "langgraph": 0.0}
        self.sqlite = MemoryManager(home=work / "sqlite", prefetch_timeout=60.0)
        self.pg_url = cluster.create_database("ironmem_bench")
        self.pg_storage = PostgresStorage(self.pg_url)
        self.pg = MemoryManager(home=work / "pg", storage=self.pg_storage, prefetch_timeout=60.0)
        self.lg_url = cluster.create_database("langgraph_bench")
        self.store: Any = None
        self._store_cm: Any = None
        self.lg_error = ""
        try:
            from langgraph.store.postgres import PostgresStore
        except ImportError as exc:
            self.lg_error = f"not installed ({exc}); pip install langgraph-checkpoint-postgres"
        else:
            self._store_cm = PostgresStore.from_conn_string(self.lg_url)
            self.store = self._store_cm.__enter__()
            self.store.setup()

    def close(self) -> None:
        if self._store_cm is not None:
            self._store_cm.__exit__(None, None, None)
        self.sqlite.close()
        self.pg.close()

    # -- loading ----------------------------------------------------------------------------------
    def grow_to(self, n: int) -> dict[str, Any]:
        """Append turns ``loaded .. n`` of the stream to all three systems; per-system load seconds."""
        if self.loaded == 0:
            self.stream = iter(turn_rows(10**12, seed=3))  # one endless deterministic stream, read in order
        before = dict(self.load_s)
        sq_index, pg_index = self.sqlite.builtin.index, self.pg_storage.index
        t_gen = time.perf_counter()
        for chunk in _chunks(itertools.islice(self.stream, n - self.loaded), CHUNK):
            self.load_s["generate"] += time.perf_counter() - t_gen
            t0 = time.perf_counter()
            sq_index.add_turns(chunk)
            t1 = time.perf_counter()
            pg_index.add_turns(chunk)
            t2 = time.perf_counter()
            if self.store is not None:
                self._load_langgraph(chunk, self.loaded)
            t3 = time.perf_counter()
            self.load_s["sqlite"] += t1 - t0
            self.load_s["postgres"] += t2 - t1
            self.load_s["langgraph"] += t3 - t2
            self.loaded += len(chunk)
            if self.loaded % 100_000 == 0 or self.loaded == n:
                self.log(f"  loaded {self.loaded:,} turns (SQLite {self.load_s['sqlite']:.0f} s, PostgreSQL "
                         f"{self.load_s['postgres']:.0f} s, LangGraph {self.load_s['langgraph']:.0f} s, "
                         f"generation {self.load_s['generate']:.0f} s)")
            t_gen = time.perf_counter()
        out = {k: round(self.load_s[k] - before[k], 1) for k in self.load_s}
        out["vacuum_analyze_s"] = {"postgres": round(_vacuum(self.pg_url), 1),
                                   "langgraph": round(_vacuum(self.lg_url), 1) if self.store is not None else None}
        return out

    def _load_langgraph(self, chunk: list[Row], first: int) -> None:
        from langgraph.store.base import PutOp

        for start in range(0, len(chunk), BATCH_LG):
            self.store.batch([
                PutOp(NS, str(i), {"session": r[0], "user": r[3], "assistant": r[4]}, index=False)
                for i, r in enumerate(chunk[start:start + BATCH_LG], first + start)
            ])

    # -- measuring --------------------------------------------------------------------------------
    def measure(self, n: int, turns: int, rounds: int, seed: int) -> dict[str, Any]:
        result: dict[str, Any] = {"turns": n, "load_s": self.grow_to(n)}
        self.log(f"  measuring at {n:,} turns")
        sq, pg = self.sqlite.builtin.index, self.pg_storage.index

        def sq_search(q: str) -> Any:
            return sq.search(q, limit=5, drop_stopwords=False)

        def pg_search(q: str) -> Any:
            return pg.search(q, limit=5, drop_stopwords=False)

        search = result["search"] = {}
        search["sqlite_cold"] = _search_summary(_search_times(sq_search, rounds, before=sq.clear_caches))
        search["sqlite"] = _search_summary(_search_times(sq_search, rounds))
        search["postgres_cold"] = _search_summary(_search_times(pg_search, rounds, before=pg.clear_caches))
        search["postgres"] = _search_summary(_search_times(pg_search, rounds))
        same = 0
        for q in EN_QUERIES + ZH_QUERIES:
            same += _top_turns(sq_search(q)) == _top_turns(pg_search(q))
        result["same_top5_as_sqlite"] = f"{same}/{len(EN_QUERIES) + len(ZH_QUERIES)}"
        if self.store is not None:
            store = self.store
            search["langgraph"] = _search_summary(_search_times(lambda q: store.search(NS, query=q, limit=5), rounds))
        self.log(f"  search done ({result['same_top5_as_sqlite']} queries with the same top 5 on both backends)")

        per_turn = result["per_turn"] = {}
        for key, manager in (("sqlite", self.sqlite), ("postgres", self.pg)):
            total, in_index = _turn_loop(manager, turns, seed=seed)
            per_turn[key] = {**summary_ms(total), "turn_index": summary_ms(in_index)}
        if self.store is not None:
            store, corpus, counter = self.store, Corpus(seed=seed), itertools.count()

            def lg_turn() -> None:
                user, assistant = corpus.turn()
                store.search(NS, query=user, limit=3)
                store.put(NS, f"live-{n}-{next(counter)}", {"session": "live", "user": user, "assistant": assistant},
                          index=False)

            per_turn["langgraph"] = summary_ms(_timed(lg_turn, turns))
        else:
            result["langgraph"] = self.lg_error
        self.log("  per-turn done")
        if self.explain:
            result["explain"] = self.explain_plans()
        return result

    # -- plans ------------------------------------------------------------------------------------
    def explain_plans(self) -> dict[str, Any]:
        """Every statement of one cold pass over the query set, with its EXPLAIN ANALYZE plan (auto_explain)."""
        import psycopg

        from ironmem.core.builtin.postgres import PostgresStorage

        settings = {"session_preload_libraries": "auto_explain", "auto_explain.log_min_duration": "0",
                    "auto_explain.log_analyze": "on", "auto_explain.log_buffers": "on",
                    "auto_explain.log_nested_statements": "on"}
        names = ["ironmem_bench"] + (["langgraph_bench"] if self.store is not None else [])
        with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
            for db in names:
                for key, value in settings.items():
                    conn.execute(f'ALTER DATABASE "{db}" SET {key} = \'{value}\'')
        log_file = Path(self.cluster.log_file)
        out: dict[str, Any] = {"ironmem": {}, "langgraph": {}}
        try:
            storage = PostgresStorage(self.pg_url)
            try:
                for q in EN_QUERIES + ZH_QUERIES:
                    start = log_file.stat().st_size
                    storage.index.clear_caches()
                    storage.index.search(q, limit=5, drop_stopwords=False)
                    out["ironmem"][q] = _plans_since(log_file, start)
            finally:
                storage.close()
            if self.store is not None:
                from langgraph.store.postgres import PostgresStore

                with PostgresStore.from_conn_string(self.lg_url) as store:
                    start = log_file.stat().st_size
                    store.search(NS, query=EN_QUERIES[0], limit=5)
                    out["langgraph"][EN_QUERIES[0]] = _plans_since(log_file, start)
        finally:
            with psycopg.connect(self.cluster.url("postgres"), autocommit=True) as conn:
                for db in names:
                    conn.execute(f'ALTER DATABASE "{db}" RESET ALL')
        summary: dict[str, Any] = {}
        for system, per_query in out.items():
            seq: dict[tuple[str, str], float] = {}  # (table, statement) -> slowest ms
            for plans in per_query.values():
                for p in plans:
                    text = " ".join(p["plan"].split("Query Text:", 1)[-1].split())[:160]
                    for name in _SEQ_SCAN.findall(p["plan"]):
                        seq[(name, text)] = max(seq.get((name, text), 0.0), p["ms"])
            slowest = {q: max(plans, key=lambda p: p["ms"]) for q, plans in per_query.items() if plans}
            summary[system] = {"seq_scans": [{"table": t, "slowest_ms": ms, "statement": q}
                                             for (t, q), ms in sorted(seq.items(), key=lambda kv: -kv[1])],
                               "statements": sum(len(p) for p in per_query.values()),
                               "slowest": slowest}
        return summary


_PLAN_START = re.compile(r"duration: ([0-9.]+) ms\s+plan:")
_SEQ_SCAN = re.compile(r"Seq Scan on ([\w.]+)")


def _plans_since(log_file: Path, start: int) -> list[dict[str, Any]]:
    """The auto_explain entries the server logged after byte ``start``: ``{"ms", "plan"}`` each."""
    time.sleep(0.05)  # the logger writes asynchronously
    with open(log_file, "rb") as fh:
        fh.seek(start)
        text = fh.read().decode("utf-8", errors="replace")
    plans = []
    pieces = _PLAN_START.split(text)
    # pieces: [before, ms, body, ms, body, ...]; a body runs until the next log line prefix
    for ms, body in zip(pieces[1::2], pieces[2::2]):
        lines = []
        for line in body.splitlines():
            if re.match(r"^\d{4}-\d\d-\d\d ", line):
                break
            lines.append(line.rstrip())
        plans.append({"ms": float(ms), "plan": "\n".join(lines).strip("\n")})
    return plans


def render(results: list[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        ref_s = r["search"].get("postgres_cold", {}).get("p95_ms")
        ref_t = r["per_turn"].get("postgres", {}).get("turn_index", {}).get("p95_ms")
        for key, label in SYSTEMS:
            s = r["search"].get(key)
            if not isinstance(s, dict):
                continue
            t = r["per_turn"].get(key)
            part = (t.get("turn_index") or t) if isinstance(t, dict) else None
            load = r["load_s"].get(key.removesuffix("_cold"))
            rows.append([
                f"{r['turns']:,}", label,
                f"{fmt_ms(s['p50_ms'])} / {fmt_ms(s['p95_ms'])}",
                fmt_ratio(s["p95_ms"] / ref_s) if ref_s else "-",
                f"{fmt_ms(t['p50_ms'])} / {fmt_ms(t['p95_ms'])}" if isinstance(t, dict) else "",
                f"{fmt_ms(part['p50_ms'])} / {fmt_ms(part['p95_ms'])}" if part else "",
                fmt_ratio(part["p95_ms"] / ref_t) if part and ref_t else "",
                f"{load:,.0f} s" if load is not None and key not in ("sqlite", "postgres") else "",
            ])
    return table(["stored turns", "system", "session_search p50 / p95 ms", "p95 / PG cold",
                  "per turn p50 / p95 ms", "in turn index (store) p50 / p95 ms", "p95 / PG", "load (this step)"],
                 rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k turns, fewer timed turns")
    ap.add_argument("--sizes", help="comma-separated history sizes, ascending (default 100000,1000000)")
    ap.add_argument("--turns", type=int, help="timed turns per system and size")
    ap.add_argument("--queries", type=int, default=3, help="timed rounds over the query set")
    ap.add_argument("--no-explain", action="store_true", help="skip the auto_explain pass")
    ap.add_argument("--out-dir", type=Path, default=RESULTS, help="where postgres_bench.json goes")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    sizes = sorted(int(s) for s in args.sizes.split(",")) if args.sizes else (QUICK_SIZES if args.quick else SIZES)
    turns = args.turns or (QUICK_TURNS if args.quick else TURNS)

    from ironmem.testing.postgres import PostgresCluster, unavailable_reason

    meta = {"benchmark": "postgres_bench", **metadata(args.quick), "sizes": sizes, "timed_turns": turns,
            "query_rounds": args.queries, "queries": {"en": EN_QUERIES, "zh": ZH_QUERIES}}
    reason = unavailable_reason()
    if reason:
        print(f"postgres_bench skipped: {reason}")
        write_json("postgres_bench", {**meta, "skipped": reason}, out_dir=args.out_dir)
        return 0
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    results = []
    work = Path(tempfile.mkdtemp(prefix="ironmem-pgbench-"))
    try:
        with PostgresCluster(fast=False, settings={"synchronous_commit": "off", "shared_buffers": "256MB",
                                                   "maintenance_work_mem": "256MB"}) as cluster:
            bench = Bench(cluster, work, lambda m: print(m, flush=True), explain=not args.no_explain)
            try:
                for i, n in enumerate(sizes):
                    print(f"== {n:,} turns", flush=True)
                    results.append(bench.measure(n, turns, args.queries, seed=11 + i))
            finally:
                bench.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = render(results)
    print(text)
    wall = round(time.perf_counter() - t_start, 1)
    load_end = os.getloadavg()
    meta["wall_s"] = wall
    meta["loadavg"] = {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]}
    print(f"wall {wall:,.0f} s; load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / "
          f"{load_start[2]:.2f}, at end {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f}")
    for r in results:
        for system, ex in (r.get("explain") or {}).items():
            if ex.get("seq_scans"):
                for seq in ex["seq_scans"]:
                    print(f"{r['turns']:,} turns, {system}: Seq Scan on {seq['table']} ({seq['slowest_ms']:.1f} ms) "
                          f"in {seq['statement']}")
    path = write_json("postgres_bench", {**meta, "results": results, "table": text}, out_dir=args.out_dir)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
