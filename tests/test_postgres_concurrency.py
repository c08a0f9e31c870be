"""Many machines, one PostgreSQL memory: 4 simulated hosts x 4 worker processes, 100 mixed writes each.

Every worker is a separate Python process with its own connection pool; all of them start at the same moment
(they also race to create the schema). Afterwards the write log is replayed serially in commit order (its
sequence numbers are drawn under the row locks, in the same transaction as the write): every logged write must
apply cleanly to the replayed state, within the limits, and the replay must end exactly where the database is.
Every write a worker saw succeed is logged exactly once; no failed write left a trace.

Run as a script, this file is the worker.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HOSTS, WORKERS_PER_HOST, WRITES = 4, 4, 100
SCOPES = ["", "ada", "bob"]
LIMITS = {"memory": 900, "user": 500}
REPO = Path(__file__).resolve().parent.parent


def _worker(url: str, host: int, worker: int, go_file: str, out: str) -> None:
    from ironmem.core.builtin.postgres import PostgresStorage
    from ironmem.core.builtin.tools import Operation, OperationError

    deadline = time.time() + 120
    while not os.path.exists(go_file) and time.time() < deadline:
        time.sleep(0.005)
    storage = PostgresStorage(url, pool_size=2)  # every worker migrates: they race on purpose
    rng = random.Random(host * 100 + worker)
    results = []
    for i in range(WRITES):
        tag = f"h{host}w{worker}n{i}"
        scope = rng.choice(SCOPES)

        def one(target: str, k: int) -> Operation:
            current = storage.read(scope, target).entries
            roll = rng.random()
            text = f"{tag}.{k} " + " ".join(rng.choice(["deploy", "tea", "爬山", "budget", "Lisbon"])
                                             for _ in range(rng.randint(1, 6)))
            if roll < 0.55 or not current:
                return Operation("add", target, text)
            victim = rng.choice(current).split(" ", 1)[0]
            if roll < 0.8:
                return Operation("replace", target, text, victim)
            return Operation("remove", target, "", victim)

        if rng.random() < 0.25:
            ops = [one(rng.choice(["memory", "user"]), k) for k in range(rng.randint(2, 3))]
        else:
            ops = [one(rng.choice(["memory", "user"]), 0)]
        try:
            storage.apply(scope, ops, LIMITS)
            ok, error = True, ""
        except OperationError as exc:
            ok, error = False, str(exc)[:80]
        results.append({"scope": scope, "ok": ok, "error": error,
                        "ops": [{"action": o.action, "target": o.target, "content": o.content,
                                 "old_text": o.old_text} for o in ops]})
    storage.close()
    Path(out).write_text(json.dumps(results), encoding="utf-8")


def test_four_hosts_four_workers_serializable(pg_url: str, tmp_path: Path) -> None:
    from ironmem.core.builtin.postgres import PostgresStorage
    from ironmem.core.builtin.tools import Operation, apply_operation, check_limit

    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = []
    for host in range(HOSTS):
        for worker in range(WORKERS_PER_HOST):
            out = tmp_path / f"h{host}w{worker}.json"
            procs.append((out, subprocess.Popen(
                [sys.executable, __file__, pg_url, str(host), str(worker), str(go), str(out)],
                env=env, cwd=str(REPO), stderr=subprocess.PIPE, text=True)))
    time.sleep(1.0)  # let them import, then start together
    go.write_text("go")
    for out, proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    results = [r for out, _ in procs for r in json.loads(out.read_text(encoding="utf-8"))]
    assert len(results) == HOSTS * WORKERS_PER_HOST * WRITES
    succeeded = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    assert len(succeeded) > 800 and failed  # a real mix: most land, some hit a limit or a stale old_text
    assert any("limit" in r["error"] for r in failed)

    storage = PostgresStorage(pg_url)
    try:
        log = storage.history()
        # Serial replay in commit order.
        state: dict[tuple[str, str], list[str]] = {}
        version: Counter[tuple[str, str]] = Counter()
        for row in log:
            scope = row["scope"]
            for target, v in zip(row["targets"], row["versions"]):
                version[(scope, target)] += 1
                assert v == version[(scope, target)], f"version gap at seq {row['seq']}"
            before = {t: list(state.get((scope, t), [])) for t in ("memory", "user")}
            after = {t: list(e) for t, e in before.items()}
            for op in row["ops"]:
                o = Operation(op["action"], op["target"], op["content"], op["old_text"])
                after[o.target], _ = apply_operation(after[o.target], o)  # raises if not serializable
            for t in ("memory", "user"):
                check_limit(after[t], before[t], LIMITS[t], t)
                state[(scope, t)] = after[t]
            assert sorted(t for t in ("memory", "user") if after[t] != before[t]) == sorted(row["targets"])
        for scope in SCOPES:
            for target in ("memory", "user"):
                db = list(storage.read(scope, target).entries)
                assert db == state.get((scope, target), []), (scope, target)
        # Nothing lost, nothing duplicated: the log holds exactly the writes the workers saw succeed.
        def key(scope: str, ops: list[dict[str, str]]) -> str:
            return json.dumps([scope, ops], sort_keys=True, ensure_ascii=False)

        logged = Counter(key(row["scope"], row["ops"]) for row in log)
        seen_ok = Counter(key(r["scope"], r["ops"]) for r in succeeded)
        assert logged == seen_ok
        assert len({row["write_id"] for row in log}) == len(log)
        assert storage.schema_version() >= 1
    finally:
        storage.close()


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
