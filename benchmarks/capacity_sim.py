"""Capacity and time over a long run: is any fact lost when MEMORY.md is full most of the time? (issue 37)

    python benchmarks/capacity_sim.py                 # 10,000 writes over 500 sessions, files + SQLite
    python benchmarks/capacity_sim.py --quick         # 1,000 writes over 50 sessions
    python benchmarks/capacity_sim.py --storage postgres      # a throwaway PostgreSQL cluster (ironmem.testing)
    python benchmarks/capacity_sim.py --storage postgresql://user@host/db
    python benchmarks/capacity_sim.py --overflow refuse   # Hermes's behaviour, for comparison in the same setup
    python benchmarks/capacity_sim.py --json out.json

A scripted agent (no model) writes facts about many subjects through the real ``memory`` tool of a real
``Session``, 20 writes per session, at the default limit (2,200 chars, about 35 facts): new facts (55%), updates
of a subject's fact by ``replace`` with the subject's id as ``old_text`` (20%), exact or reworded duplicates
(15%) and elaborations of the current fact (10%). The file is full from the second session on.

Reported, from the memory as stored at the end (files or database, the archive log):

- **no fact lost**: every text ever written is live (in MEMORY.md), archived, superseded (replaced or merged,
  with its record), or covered (a duplicate whose words the stored entry already holds; the tool said so);
- **recall@5 of archived facts**: ``session_search`` for a subject whose current fact is archived finds it in
  its first 5 results;
- **current over superseded**: for a subject updated at least once, a question about the present finds the
  current fact in the first 5, and no superseded version of it ranks above it; with a question about the past,
  a superseded version is found in the first 5 (shown, marked);
- writes refused, and the time per write.

Deterministic (fixed seed, no model, no network).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _util import metadata, percentile, table, write_json

from ironmem import MemoryManager
from ironmem.core.builtin.archive import near_duplicate

#: (statement, present question, past question, values): ``{s}`` is the subject id, ``{v}`` its value.
TEMPLATES = [
    ("The {s} service listens on port {v}", "which port does the {s} service listen on now",
     "which port did the {s} service listen on before", [str(p) for p in range(3000, 9000, 7)]),
    ("Project {s} stores its data in {v}", "where does project {s} store its data currently",
     "where did project {s} store its data previously",
     ["Postgres", "SQLite", "MongoDB", "Redis", "DynamoDB", "Cassandra", "ClickHouse", "MySQL", "BigQuery", "S3"]),
    ("The {s} repository is maintained by the {v} team", "which team maintains the {s} repository now",
     "which team maintained the {s} repository before",
     ["platform", "payments", "search", "mobile", "infra", "data", "growth", "security", "billing", "identity"]),
    ("The {s} backup job runs every {v}", "how often does the {s} backup job run these days",
     "how often did the {s} backup job run before",
     ["hour", "day", "week", "night", "6 hours", "12 hours", "weekday", "Sunday", "month", "quarter"]),
]
_SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "vax", "zo", "pel", "quin", "dra", "fen", "gor", "hal", "jex", "nim"]


def subject_name(i: int) -> str:
    """A unique one-word id (a token of its own for the search index)."""
    a, b, c = i % 15, (i // 15) % 15, (i // 225) % 15
    return f"{_SYLLABLES[a]}{_SYLLABLES[b]}{_SYLLABLES[c]}{i // 3375}"


class Agent:
    """The scripted writer and the ground truth it keeps."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.subjects: list[dict[str, Any]] = []  # {"name", "template", "current", "history": [texts]}
        self.written: list[str] = []  # every text the agent sent (add or replace content)

    def new_fact(self) -> dict[str, Any]:
        template = self.rng.randrange(len(TEMPLATES))
        name = subject_name(len(self.subjects))
        text = TEMPLATES[template][0].format(s=name, v=self.rng.choice(TEMPLATES[template][3]))
        subject = {"name": name, "template": template, "current": text, "history": [text], "updates": 0}
        self.subjects.append(subject)
        return subject

    def step(self, session: Any) -> tuple[str, dict[str, Any]]:
        roll = self.rng.random()
        if not self.subjects or roll < 0.55:
            subject = self.new_fact()
            return "add", _call(session, "add", subject["current"])
        subject = self.rng.choice(self.subjects)
        template = TEMPLATES[subject["template"]]
        if roll < 0.75:  # an update: the subject's value changed
            values = [v for v in template[3] if template[0].format(s=subject["name"], v=v) not in subject["history"]]
            text = template[0].format(s=subject["name"], v=self.rng.choice(values or template[3]))
            result = _call(session, "replace", text, old_text=subject["name"])
            if result.get("success"):
                subject["current"] = text
                subject["history"].append(text)
                subject["updates"] += 1
            return "update", result
        if roll < 0.90:  # a duplicate: the same fact again, as is or reworded (case, punctuation)
            text = subject["current"] if self.rng.random() < 0.5 else subject["current"].lower() + "."
            result = _call(session, "add", text)
            self._follow(subject, text, result)
            return "duplicate", result
        text = subject["current"] + ", as agreed in the planning meeting"  # an elaboration of the same fact
        result = _call(session, "add", text)
        self._follow(subject, text, result)
        return "elaborate", result

    def _follow(self, subject: dict[str, Any], text: str, result: dict[str, Any]) -> None:
        """After a merge the stored entry is what the memory says now."""
        if not result.get("success"):
            return
        for merge in result.get("merged", []):
            if not str(merge.get("now", "")).startswith("unchanged"):
                subject["current"] = text
                subject["history"].append(text)
                return
        if text != subject["current"] and not result.get("merged"):
            subject["current"] = text  # added as is: a new entry
            subject["history"].append(text)


def _call(session: Any, action: str, content: str, old_text: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"action": action, "target": "memory", "content": content}
    if old_text is not None:
        args["old_text"] = old_text
    return json.loads(session.handle_tool_call("memory", args))


def run(writes: int, sessions: int, *, storage: str | None, overflow: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    home = tempfile.mkdtemp(prefix="ironmem-capacity-")
    manager = MemoryManager(home=home, storage=storage, overflow=overflow)
    agent = Agent(rng)
    per_session = writes // sessions
    outcomes: dict[str, dict[str, int]] = {}
    seconds: list[float] = []
    full_at_write = 0
    limit = manager.builtin.limits["memory"]
    moved = merged = 0
    for s in range(sessions):
        session = manager.start_session(f"s{s:04d}")
        for _ in range(per_session):
            t0 = time.perf_counter()
            kind, result = agent.step(session)
            seconds.append(time.perf_counter() - t0)
            agent.written.append(kind)
            counts = outcomes.setdefault(kind, {"ok": 0, "refused": 0})
            counts["ok" if result.get("success") else "refused"] += 1
            moved += len(result.get("archived", []))
            merged += sum(1 for m in result.get("merged", []) if not str(m.get("now", "")).startswith("unchanged"))
            if manager.builtin.file("memory").read().chars > 0.8 * limit:
                full_at_write += 1
        session.end()
    # -- no fact lost -------------------------------------------------------------------------------
    live = set(manager.builtin.file("memory").read().entries)
    state = manager.builtin.archive_state("memory")
    archived = {r.text for r in state.archived_now(live)}
    superseded = {r.text for r in state.superseded_now(live)}
    kept = live | archived | superseded
    texts = {t for subject in agent.subjects for t in subject["history"]}
    lost, covered = [], 0
    for text in texts:
        if text in kept:
            continue
        if any(near_duplicate(text, k) for k in kept if k.split(" ")[:3] == text.split(" ")[:3]):
            covered += 1
            continue
        lost.append(text)
    # -- recall ----------------------------------------------------------------------------------------
    probe = manager.start_session("probe")

    def top5(query: str) -> list[dict[str, Any]]:
        return list(json.loads(probe.handle_tool_call("session_search", {"query": query, "limit": 5}))["results"])

    archived_subjects = [x for x in agent.subjects if x["current"] in archived]
    sample = rng.sample(archived_subjects, min(300, len(archived_subjects)))
    found_archived = sum(1 for subj in sample if any(h["text"] == subj["current"]
                                                  for h in top5(TEMPLATES[subj["template"]][1].format(s=subj["name"]))))
    updated = [x for x in agent.subjects if x["updates"]]
    sample_u = rng.sample(updated, min(300, len(updated)))
    current_first = past_found = 0
    for subj in sample_u:
        hits = top5(TEMPLATES[subj["template"]][1].format(s=subj["name"]))
        texts_found = [h["text"] for h in hits]
        if subj["current"] in texts_found:
            rank = texts_found.index(subj["current"])
            older = [i for i, h in enumerate(hits) if h["text"] in subj["history"][:-1] and h["text"] != subj["current"]]
            current_first += all(i > rank for i in older)
        past = top5(TEMPLATES[subj["template"]][2].format(s=subj["name"]))
        past_found += any(h.get("status") == "superseded" and h["text"] in subj["history"][:-1] for h in past)
    manager.close()
    return {
        "writes": len(seconds), "sessions": sessions, "overflow": overflow,
        "storage": "postgresql" if storage else "files",
        "subjects": len(agent.subjects), "texts_written": len(texts),
        "outcomes": outcomes,
        "full_share": round(full_at_write / max(1, len(seconds)), 3),
        "live": len(live), "archived": len(archived), "superseded": len(superseded), "covered": covered,
        "lost": len(lost), "lost_examples": lost[:5],
        "moved_to_archive": moved, "merged": merged,
        "recall_at_5_archived": round(found_archived / max(1, len(sample)), 4), "archived_sample": len(sample),
        "current_over_superseded_at_5": round(current_first / max(1, len(sample_u)), 4),
        "superseded_shown_for_past_questions_at_5": round(past_found / max(1, len(sample_u)), 4),
        "updated_sample": len(sample_u),
        "write_ms": {"p50": round(1000 * percentile(seconds, 50), 2), "p95": round(1000 * percentile(seconds, 95), 2)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 writes over 50 sessions")
    ap.add_argument("--writes", type=int, default=10_000)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--storage", default=None,
                    help="'postgres' (a throwaway cluster) or a postgresql:// URL (default: files + SQLite)")
    ap.add_argument("--overflow", choices=["archive", "refuse"], default="archive")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--json", help="also write the report to this file")
    args = ap.parse_args()
    writes, sessions = (1000, 50) if args.quick else (args.writes, args.sessions)
    t0 = time.perf_counter()
    report: dict[str, Any]
    if args.storage == "postgres":
        from ironmem.testing.postgres import PostgresCluster, unavailable_reason

        reason = unavailable_reason()
        if reason:
            print(f"capacity_sim skipped: {reason}")
            return 0
        with PostgresCluster() as cluster:
            report = run(writes, sessions, storage=cluster.create_database("capacity"), overflow=args.overflow,
                         seed=args.seed)
    else:
        report = run(writes, sessions, storage=args.storage, overflow=args.overflow, seed=args.seed)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    rows = [[kind, str(c["ok"]), str(c["refused"])] for kind, c in sorted(report["outcomes"].items())]
    print(f"capacity_sim: {report['writes']:,} writes over {report['sessions']} sessions, overflow={args.overflow}, "
          f"storage={report['storage']}; file over 80% full at {100 * report['full_share']:.0f}% of writes")
    print(table(["write", "landed", "refused"], rows))
    print(f"texts written: {report['texts_written']:,} -> live {report['live']}, archived {report['archived']:,}, "
          f"superseded {report['superseded']:,}, covered by a stored entry {report['covered']:,}, "
          f"LOST {report['lost']}")
    print(f"moved to the archive: {report['moved_to_archive']:,}; merged into an existing entry: {report['merged']:,}")
    print(f"recall@5 of archived facts: {100 * report['recall_at_5_archived']:.1f}% (of {report['archived_sample']})")
    print(f"current fact in the top 5, above every older version: {100 * report['current_over_superseded_at_5']:.1f}%"
          f"; a superseded version shown for a question about the past: "
          f"{100 * report['superseded_shown_for_past_questions_at_5']:.1f}% (of {report['updated_sample']} updated)")
    print(f"time per write: p50 {report['write_ms']['p50']} ms, p95 {report['write_ms']['p95']} ms; "
          f"{report['seconds']} s in all")
    report["meta"] = metadata(args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    path = write_json("capacity_sim" + ("_postgres" if report["storage"] == "postgresql" else "")
                      + ("_refuse" if args.overflow == "refuse" else ""), report)
    print(f"JSON: {path}")
    return 0 if report["lost"] == 0 or args.overflow == "refuse" else 1


if __name__ == "__main__":
    sys.exit(main())
