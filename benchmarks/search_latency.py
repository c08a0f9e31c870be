"""``session_search`` latency at 10k, 100k and 1M indexed turns, English and Chinese queries.

    python benchmarks/search_latency.py [--quick] [--sizes 10000,100000,1000000] [--no-cache]

Each history is a deterministic corpus (``benchmarks/corpus.py``: English with ~15% Chinese turns, a Zipf-like
vocabulary of common words and a long tail of names and error codes) bulk-loaded with ``SearchIndex.add_turns``.
Latency is measured through the tool itself (``BuiltinMemoryProvider.handle_tool_call("session_search", ...)``,
JSON result included), in two states:

- **cold**: ironmem's per-word candidate cache is cleared before every call (a query with words not searched
  before; the SQLite file is in the OS page cache, as it is on a machine in use);
- **warm**: the same queries again, with the candidate lists cached (what recall sees from turn to turn).

Peers measured in the same run on the same database: FTS5 ``bm25()`` over every match (``ORDER BY bm25 LIMIT 5``,
exact but unbounded) and bm25 over the newest 2,000 matches only (bounded, the usual fix, which lets a common word
crowd out a rare one). ``anchor hits`` counts, for the queries holding a rare word (a project name, an error
code, a city), how many of the top 5 results contain it: ranking quality, not speed.

Built databases are cached under ``$TMPDIR/ironmem-bench-cache/`` keyed by the corpus version and the index
schema, so a re-run skips the build; ``--no-cache`` builds from scratch (the full benchmark still fits in the
10-minute budget then).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import logging
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import fmt_ms, fmt_ratio, metadata, summary_ms, table, write_json
from corpus import CORPUS_VERSION, EN_QUERIES, ZH_QUERIES, turn_rows

SIZES = [10_000, 100_000, 1_000_000]
QUICK_SIZES = [10_000, 100_000]
ROUNDS, QUICK_ROUNDS = 15, 6

#: Rare words whose presence in the top results shows the ranking found them.
ANCHORS = {"flight to Lisbon hotel": "Lisbon", "Kamirito release": "Kamirito", "E4242 error": "E4242"}


def cache_key() -> str:
    from ironmem.core.builtin import index, ranking

    source = index._SCHEMA + index._FTS_SCHEMA + inspect.getsource(ranking.tokens) + inspect.getsource(ranking.stem)
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]
    return f"{CORPUS_VERSION}-{digest}"


def cache_dir() -> Path:
    return Path(os.environ.get("IRONMEM_BENCH_CACHE") or Path(tempfile.gettempdir()) / "ironmem-bench-cache")


def build_db(size: int, *, use_cache: bool, log: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """The database holding ``size`` corpus turns: built now (timed) or taken from the cache."""
    from ironmem.core.builtin.index import SearchIndex

    folder = cache_dir() / cache_key()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"turns-{size}.db"
    if use_cache and path.exists():
        return path, {"cached": True}
    partial = folder / f"turns-{size}.partial.db"
    for stale in folder.glob(f"turns-{size}.partial.db*"):
        stale.unlink()
    t0 = time.perf_counter()
    index = SearchIndex(partial)
    index.add_turns(turn_rows(size, seed=1))
    index.close()
    build_s = time.perf_counter() - t0
    os.replace(partial, path)
    info = {"cached": False, "build_s": round(build_s, 1), "turns_per_s": round(size / build_s)}
    log(f"  built {size:,} turns in {build_s:.1f}s ({size / build_s:,.0f} turns/s, corpus generation included)")
    return path, info


def _hits_with(results: list[dict[str, Any]], anchor: str) -> int:
    return sum(1 for r in results if anchor.casefold() in str(r.get("text", "")).casefold())


def measure_ironmem(home: Path, rounds: int, seed: int = 0) -> dict[str, Any]:
    from ironmem.core.builtin import BuiltinMemoryProvider

    provider = BuiltinMemoryProvider(home)
    provider.initialize("bench-search")
    queries = [("en", q) for q in EN_QUERIES] + [("zh", q) for q in ZH_QUERIES]
    rng = random.Random(seed)
    samples: dict[str, dict[str, list[float]]] = {"cold": {"en": [], "zh": []}, "warm": {"en": [], "zh": []}}
    cpu: dict[str, list[float]] = {"cold": [], "warm": []}  # process CPU time: what the load of the machine does not change
    hits: dict[str, int] = {}
    anchors: dict[str, int] = {}
    clock = time.perf_counter
    for state in ("cold", "warm"):
        for _ in range(rounds):
            order = list(queries)
            rng.shuffle(order)
            for lang, query in order:
                if state == "cold":
                    provider.index.clear_caches()
                c0, t0 = time.process_time(), clock()
                raw = provider.handle_tool_call("session_search", {"query": query, "limit": 5})
                samples[state][lang].append(clock() - t0)
                cpu[state].append(time.process_time() - c0)
                if query not in hits:
                    results = json.loads(raw)["results"]
                    hits[query] = len(results)
                    if query in ANCHORS:
                        anchors[query] = _hits_with(results, ANCHORS[query])
    provider.shutdown()
    out: dict[str, Any] = {"hits": hits, "anchor_hits": anchors}
    for state, by_lang in samples.items():
        out[state] = {lang: summary_ms(v) for lang, v in by_lang.items()}
        out[state]["all"] = summary_ms(by_lang["en"] + by_lang["zh"])
        out[state]["cpu"] = summary_ms(cpu[state])
    return out


def _anchor_possible(db: Path) -> dict[str, int]:
    """For each anchored query: how many of its top 5 could hold the anchor (turns that contain it, at most 5)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {}
    for query, anchor in ANCHORS.items():
        found = conn.execute("SELECT count(*) FROM turns_fts WHERE turns_fts MATCH ?", (f'"{anchor}"',)).fetchone()[0]
        out[query] = min(5, int(found))
    conn.close()
    return out


def measure_bm25(db: Path, reps: int, *, capped: bool) -> dict[str, Any]:
    """FTS5 bm25 ranking, uncapped (exact, unbounded) or over the newest 2,000 matches (bounded)."""
    from ironmem.core.builtin.index import build_match_query

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    if capped:
        sql = ("SELECT rowid, s FROM (SELECT rowid, bm25(turns_fts) AS s FROM turns_fts WHERE turns_fts MATCH ? "
               "ORDER BY rowid DESC LIMIT 2000) ORDER BY s LIMIT 5")
    else:
        sql = "SELECT rowid, bm25(turns_fts) AS s FROM turns_fts WHERE turns_fts MATCH ? ORDER BY s LIMIT 5"
    fetch = "SELECT user, assistant FROM turns WHERE id = ?"
    samples: dict[str, list[float]] = {"en": [], "zh": []}
    anchors: dict[str, int] = {}
    for lang, queries in (("en", EN_QUERIES), ("zh", ZH_QUERIES)):
        for query in queries:
            match = build_match_query(query, drop_stopwords=False)  # what session_search matches
            for rep in range(reps):
                t0 = time.perf_counter()
                rows = conn.execute(sql, (match,)).fetchall()
                texts = [conn.execute(fetch, (rowid,)).fetchone() for rowid, _ in rows]
                samples[lang].append(time.perf_counter() - t0)
                if rep == 0 and query in ANCHORS:
                    anchors[query] = sum(1 for t in texts if t and ANCHORS[query].casefold() in (t[0] + t[1]).casefold())
    conn.close()
    return {"all": summary_ms(samples["en"] + samples["zh"]), "en": summary_ms(samples["en"]),
            "zh": summary_ms(samples["zh"]), "anchor_hits": anchors}


def run(quick: bool = False, sizes: list[int] | None = None, use_cache: bool = True,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    logging.getLogger("ironmem").setLevel(logging.ERROR)
    sizes = sizes if sizes is not None else (QUICK_SIZES if quick else SIZES)
    rounds = QUICK_ROUNDS if quick else ROUNDS
    results: list[dict[str, Any]] = []
    for size in sizes:
        db, build = build_db(size, use_cache=use_cache, log=log)
        tmp = Path(tempfile.mkdtemp(prefix="ironmem-bench-search-"))
        try:
            home = tmp / "home"
            (home / ".ironmem").mkdir(parents=True)
            shutil.copyfile(db, home / ".ironmem" / "search.db")
            ours = measure_ironmem(home, rounds)
            ours["anchor_possible"] = _anchor_possible(db)
            reps = 2 if size >= 1_000_000 else (3 if size >= 100_000 else 5)
            exact = measure_bm25(db, reps, capped=False)
            capped = measure_bm25(db, reps, capped=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        entry = {"turns": size, "build": build, "ironmem": ours, "bm25_all_matches": exact, "bm25_newest_2000": capped}
        results.append(entry)
        log(f"  {size:>9,} turns: cold p50 {fmt_ms(ours['cold']['all']['p50_ms'])} ms, "
            f"p95 {fmt_ms(ours['cold']['all']['p95_ms'])} ms (CPU p95 {fmt_ms(ours['cold']['cpu']['p95_ms'])} ms); warm p95 {fmt_ms(ours['warm']['all']['p95_ms'])} ms; "
            f"bm25 over all matches p95 {fmt_ms(exact['all']['p95_ms'])} ms")
    return {"benchmark": "search_latency", **metadata(quick), "load_average": os.getloadavg(), "cache_key": cache_key(), "rounds": rounds,
            "queries": {"en": EN_QUERIES, "zh": ZH_QUERIES}, "results": results, "targets": _targets(results)}


def _targets(results: list[dict[str, Any]]) -> dict[str, Any]:
    by = {r["turns"]: r["ironmem"]["cold"]["all"]["p95_ms"] for r in results}
    out: dict[str, Any] = {}
    if 100_000 in by:
        out["p95_under_20ms_at_100k"] = {"value_ms": by[100_000], "met": by[100_000] < 20.0}
    if 1_000_000 in by:
        out["p95_under_100ms_at_1m"] = {"value_ms": by[1_000_000], "met": by[1_000_000] < 100.0}
    return out


def render(result: dict[str, Any]) -> str:
    rows = []
    for r in result["results"]:
        ours, exact, capped = r["ironmem"], r["bm25_all_matches"], r["bm25_newest_2000"]
        cold = ours["cold"]
        anchors_total = sum(ours["anchor_possible"].values())
        rows.append([
            f"{r['turns']:,}",
            "ironmem session_search",
            fmt_ms(cold["en"]["p50_ms"]), fmt_ms(cold["en"]["p95_ms"]),
            fmt_ms(cold["zh"]["p50_ms"]), fmt_ms(cold["zh"]["p95_ms"]),
            fmt_ms(ours["warm"]["all"]["p95_ms"]),
            "",
            f"{sum(ours['anchor_hits'].values())}/{anchors_total}",
        ])
        for label, peer in (("FTS5 bm25, all matches", exact), ("FTS5 bm25, newest 2,000", capped)):
            ratio = peer["all"]["p95_ms"] / cold["all"]["p95_ms"] if cold["all"]["p95_ms"] else None
            rows.append([
                "", label,
                fmt_ms(peer["en"]["p50_ms"]), fmt_ms(peer["en"]["p95_ms"]),
                fmt_ms(peer["zh"]["p50_ms"]), fmt_ms(peer["zh"]["p95_ms"]),
                "", fmt_ratio(ratio), f"{sum(peer['anchor_hits'].values())}/{anchors_total}",
            ])
    lines = [
        "session_search latency (ms; cold = candidate cache cleared before each call; p95 ratio = peer / ironmem cold)",
        table(["turns", "method", "EN p50", "EN p95", "ZH p50", "ZH p95", "warm p95", "p95 ratio", "anchor hits"], rows),
    ]
    builds = [r for r in result["results"] if not r["build"].get("cached", True)]
    if builds:
        lines.append("build: " + "; ".join(f"{r['turns']:,} turns {r['build']['build_s']}s" for r in builds))
    for r in result["results"]:
        cpu = r["ironmem"]["cold"].get("cpu")
        if cpu:
            lines.append(f"{r['turns']:,} turns, cold, process CPU time: p50 {fmt_ms(cpu['p50_ms'])} ms, "
                         f"p95 {fmt_ms(cpu['p95_ms'])} ms (the load inflates it far less than wall time)")
    if result.get("load_average"):
        lines.append("load average at the end: " + ", ".join(f"{x:.2f}" for x in result["load_average"]))
    for name, t in result["targets"].items():
        lines.append(f"target {name}: {'MET' if t['met'] else 'MISSED'} ({fmt_ms(t['value_ms'])} ms)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k and 100k turns, fewer rounds")
    ap.add_argument("--sizes", help="comma-separated sizes, e.g. 10000,100000,1000000")
    ap.add_argument("--no-cache", action="store_true", help="build every database from scratch")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    result = run(quick=args.quick, sizes=sizes, use_cache=not args.no_cache)
    print(render(result))
    print(f"wrote {write_json('search_latency', result)}")


if __name__ == "__main__":
    main()
