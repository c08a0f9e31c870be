"""Micro-benchmarks: snapshot render, session start, memory writes, fence, token counting.

    python benchmarks/micro.py [--quick]

- **snapshot render**: ``MemoryManager.render_snapshot()`` with MEMORY.md and USER.md filled to ~95% of their
  default limits (read both files, scan every entry, render, hash), and ``start_session()`` which does that
  plus initialization;
- **memory write**: one ``memory`` tool call (``add`` then ``remove``, alternating): exclusive file lock, re-read,
  temp file, fsync, ``os.replace``, directory fsync, index sync. Disk-bound: fsync dominates;
- **fence**: ``fence()`` of a three-item recall, ``sanitize()`` of a 2 KB entry;
- **token counting** (``ironmem.analysis.tokens``, tiktoken o200k_base, offline files): counting the snapshot,
  throughput on a 100 KB text, and a full ``TokenReport.for_session``.

Scanner throughput is measured by ``benchmarks/security_eval.py`` (``run.py`` runs both).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import fmt_ms, metadata, summary_ms, table, write_json
from corpus import Corpus

MEMORY_ENTRIES = [
    "Project Kestrel: Python 3.11, uv, SQLite; CI on GitHub Actions; deploy with `make release`.",
    "Staging is staging-2 (Debian 12); never restart it on Fridays - the weekly batch runs then.",
    "Weekly report goes to the team on Monday 9:00 CET; keep it under one page.",
    "Benchmarks: compare numbers only on the same machine; the CI box has 2 cores.",
    "The user's repo uses ruff (line length 110) and pytest with --timeout 300.",
    "Database: PostgreSQL 16 in prod, SQLite in tests; migrations live in db/migrations.",
    "API keys are in 1Password, never in files; rotate the staging key monthly.",
    "用户的项目叫 Kamirito，数据库用 PostgreSQL，周五不部署。",
    "Docs site builds with mkdocs-material; preview with `mkdocs serve -a 0.0.0.0:8000`.",
    "On-call rotation: Ada (weeks 1-2), Grace (weeks 3-4); escalate to #infra after 30 min.",
    "Release notes follow Keep a Changelog; version bumps via `uv version --bump`.",
    "The analytics job reads from the replica (db-replica-1), never from the primary.",
    "Prefers pathlib over os.path and f-strings over format(); type hints everywhere.",
    "Known flaky test: test_sync_retry on macOS runners; rerun once before digging in.",
    "Customer Hoshino Ltd needs invoices in JPY and Japanese; contact: billing@hoshino.example.",
    "Latency budget for the search endpoint: p95 under 50 ms at 1M documents.",
    "Kubernetes: namespace kestrel-prod; HPA 2-10 replicas; alerts go to PagerDuty.",
    "Style for commit messages: imperative mood, under 72 chars, reference the issue.",
    "The user reviews PRs in the morning; ping after 14:00 for same-day merges.",
    "Backups: nightly pg_dump to s3://kestrel-backups, 30-day retention, restore tested monthly.",
    "Do not use pandas in the core package; it is an optional extra only.",
    "Meeting notes go in docs/meetings/YYYY-MM-DD.md.",
]
USER_ENTRIES = [
    "Name: Ada Okafor. Timezone: CET (Berlin). Languages: English, German, some Mandarin.",
    "Senior backend engineer; 12 years of Python, learning Rust.",
    "Prefers short answers with code first, then a one-line explanation.",
    "Likes hiking (爬山) on weekends and drinks oolong tea; no coffee after noon.",
    "Uses a 2021 MacBook Pro (M1) and a Linux workstation; editor: Neovim.",
    "Has two kids (7 and 10); school pickup at 15:30 on weekdays.",
    "Allergic to peanuts - mention it when suggesting restaurants.",
    "Prefers metric units and 24-hour time.",
    "Reads Hacker News and LWN; dislikes marketing tone.",
    "Vegetarian since 2019; favourite cuisine: Sichuan (火锅 without meat).",
    "Wants reminders one day ahead, not on the same day.",
    "Working on a talk about SQLite FTS5 for PyCon DE.",
    "Runs 10 km three times a week; training for a half marathon in October.",
]


def _fill(manager: Any, target: str, entries: list[str], limit: int) -> int:
    session = manager.start_session("micro-setup")
    added = 0
    for content in entries:
        if manager.builtin.files[target].read().chars + len(content) + 3 > limit * 0.95:
            break
        session.handle_tool_call("memory", {"action": "add", "target": target, "content": content})
        added += 1
    return added


def _time(fn: Callable[[], Any], n: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(quick: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    from ironmem import MemoryManager
    from ironmem.core.fence import fence, sanitize

    logging.getLogger("ironmem").setLevel(logging.ERROR)
    n = 200 if quick else 1000
    n_writes = 50 if quick else 200
    tmp = Path(tempfile.mkdtemp(prefix="ironmem-bench-micro-"))
    rows: list[dict[str, Any]] = []

    def record(name: str, samples: list[float], **extra: Any) -> dict[str, Any]:
        entry = {"name": name, **summary_ms(samples), **extra}
        rows.append(entry)
        log(f"  {name:<44} p50 {fmt_ms(entry['p50_ms'])} ms  p95 {fmt_ms(entry['p95_ms'])} ms")
        return entry

    try:
        manager = MemoryManager(home=tmp / "home")
        n_mem = _fill(manager, "memory", MEMORY_ENTRIES, manager.builtin.limits["memory"])
        n_user = _fill(manager, "user", USER_ENTRIES, manager.builtin.limits["user"])
        state = {t: manager.builtin.files[t].read() for t in ("memory", "user")}
        chars = {t: state[t].chars for t in state}
        record("snapshot render (render_snapshot)", _time(manager.render_snapshot, n),
               entries={"memory": n_mem, "user": n_user}, chars=chars)
        counter_box: dict[str, int] = {"i": 0}

        def start() -> None:
            counter_box["i"] += 1
            manager.start_session(f"micro-{counter_box['i']}")

        record("start_session (initialize + snapshot)", _time(start, n // 2))

        session = manager.start_session("micro-writes")
        flip = {"add": True}
        manager.builtin.limits["memory"] = 100_000  # room for the alternating write below
        manager.builtin.files["memory"].limit = 100_000

        def write() -> None:
            if flip["add"]:
                args = {"action": "add", "target": "memory", "content": "Temporary note for the write benchmark."}
            else:
                args = {"action": "remove", "target": "memory", "old_text": "Temporary note for the write benchmark."}
            flip["add"] = not flip["add"]
            session.handle_tool_call("memory", args)

        record("memory tool write (lock+fsync+replace)", _time(write, n_writes))

        corpus = Corpus(seed=5)
        recall_text = "\n".join(f"- User: {u}\n  Assistant: {a}" for u, a in (corpus.turn() for _ in range(3)))
        entry_2k = " ".join(corpus.turn()[1] for _ in range(20))[:2048]
        record("fence() of a 3-item recall", _time(lambda: fence(recall_text), n), chars=len(recall_text))
        record("sanitize() of a 2 KB entry", _time(lambda: sanitize(entry_2k), n), chars=len(entry_2k))

        tokens: dict[str, Any] = {}
        try:
            from ironmem.analysis.tokens import TokenCounter, TokenReport

            counter = TokenCounter()
            snapshot = session.system_prompt_block()
            record("count tokens of the snapshot", _time(lambda: counter.count(snapshot), n),
                   tokens=counter.count(snapshot), chars=len(snapshot))
            big = " ".join(" ".join(corpus.turn()) for _ in range(600))[:100_000]
            samples = _time(lambda: counter.count(big), 20 if quick else 50, warmup=2)
            big_tokens = counter.count(big)
            tokens["throughput_tokens_per_s"] = round(big_tokens / (sorted(samples)[len(samples) // 2]))
            tokens["throughput_chars_per_s"] = round(len(big) / (sorted(samples)[len(samples) // 2]))
            record("count tokens of 100 KB text", samples, tokens=big_tokens)
            session.prefetch("what did we decide about the staging server?")
            record("TokenReport.for_session", _time(lambda: TokenReport.for_session(session, counter), n // 10, 2))
        except ImportError as exc:  # tokens.py not there yet
            tokens["skipped"] = f"ironmem.analysis.tokens unavailable: {exc}"
            log(f"  token counting skipped: {exc}")
        manager.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"benchmark": "micro", **metadata(quick), "results": rows, "tokens": tokens}


def render(result: dict[str, Any]) -> str:
    rows = [[r["name"], fmt_ms(r["p50_ms"]), fmt_ms(r["p95_ms"]), str(r["n"])] for r in result["results"]]
    lines = ["Micro-benchmarks (ms)", table(["operation", "p50", "p95", "n"], rows, left=1)]
    tok = result.get("tokens", {})
    if "throughput_tokens_per_s" in tok:
        lines.append(f"token counting throughput: {tok['throughput_tokens_per_s']:,} tokens/s "
                     f"({tok['throughput_chars_per_s'] / 1e6:.1f} M chars/s)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    result = run(quick=args.quick)
    print(render(result))
    print(f"wrote {write_json('micro', result)}")


if __name__ == "__main__":
    main()
