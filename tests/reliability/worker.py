"""Worker processes for tests/test_reliability.py (each mode is a real, separate Python process).

    python worker.py mixed HOME WORKER_ID N_OPS SEED LOG RESULTS GO_FILE
    python worker.py adds HOME WORKER_ID N GO_FILE
    python worker.py zygote                      (reads commands on stdin; see Zygote)
    python worker.py fsize HOME

Kept free of pytest so that what runs here is exactly the library, in its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HUGE = 10_000_000  # char limits large enough that no test write hits them


def _wait_for(go_file: str, worker: int) -> None:
    """A start barrier: say "ready", then wait for the go file, so every worker starts writing at once."""
    Path(f"{go_file}.ready.{worker}").touch()
    deadline = time.monotonic() + 60
    while not os.path.exists(go_file):
        if time.monotonic() > deadline:
            raise SystemExit("start signal never came")
        time.sleep(0.001)


# --------------------------------------------------------------------------------------------------
# mixed: 100 add / replace / remove / batch operations, each logged in lock order
# --------------------------------------------------------------------------------------------------
def mixed(home: str, worker: int, n_ops: int, seed: int, log_path: str, results_path: str, go_file: str) -> None:
    """Apply ``n_ops`` random operations through the memory tool and log each one *in lock order*.

    The log is written from inside ``MemoryFile.locked()`` - the lock the library itself takes for every write -
    right before the lock is released: the operation, the entries the library read under the lock ("before")
    and the entries on disk when it is done ("after"). Appends use O_APPEND + one ``os.write`` per line, so lines
    from processes holding different files' locks never interleave. The test replays the log serially.
    """
    from ironmem.core.builtin import BuiltinMemoryProvider
    from ironmem.core.builtin.store import MemoryFile

    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    current: dict[str, object] = {}
    original = MemoryFile.locked

    @contextlib.contextmanager
    def logged(self: MemoryFile) -> Iterator[object]:
        with original(self) as state:
            try:
                yield state
            finally:  # still holding the lock: the library's own write (if any) has landed
                after = self.read()
                record = {"worker": worker, "seq": current["seq"], "file": self.path.name, "op": current["op"],
                          "before": list(state.entries), "after": list(after.entries)}
                os.write(log_fd, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))

    MemoryFile.locked = logged  # type: ignore[method-assign]
    provider = BuiltinMemoryProvider(home, memory_char_limit=HUGE, user_char_limit=HUGE)
    rng = random.Random(seed * 1000 + worker)
    live: dict[str, list[str]] = {"memory": [], "user": []}  # this worker's tags believed to be on disk
    results = []
    _wait_for(go_file, worker)
    for seq in range(n_ops):
        target = "memory" if rng.random() < 0.8 else "user"
        tag = f"w{worker}-{seq}:"  # unique; the colon keeps "w1-1:" from matching "w1-10:"
        words = " ".join(rng.choice(["tea", "deploy", "爬山", "budget", "Lisbon", "kayak", "notes"]) for _ in range(3))
        roll = rng.random()
        mine = live[target]
        if roll < 0.40 or not mine:
            op: dict[str, object] = {"action": "add", "target": target, "content": f"{tag} {words}"}
        elif roll < 0.60:
            op = {"action": "replace", "target": target, "old_text": rng.choice(mine), "content": f"{tag} {words}"}
        elif roll < 0.75:
            op = {"action": "remove", "target": target, "old_text": rng.choice(mine)}
        elif roll < 0.87:  # someone else's entry: may already be gone, which the replay must reproduce
            other = f"w{rng.randrange(8)}-{rng.randrange(max(1, seq))}:"
            if rng.random() < 0.5:
                op = {"action": "remove", "target": target, "old_text": other}
            else:
                op = {"action": "replace", "target": target, "old_text": other, "content": f"{tag} took over"}
        else:  # all or nothing: the second operation fails when its entry is gone
            op = {"operations": [
                {"action": "add", "target": target, "content": f"{tag} {words} (batch)"},
                {"action": "remove", "target": target, "old_text": rng.choice(mine)},
            ]}
        current["seq"], current["op"] = seq, op
        result = json.loads(provider.handle_tool_call("memory", op))
        results.append({"worker": worker, "seq": seq, "success": bool(result.get("success"))})
        if result.get("success"):
            ops = op.get("operations", [op])  # type: ignore[union-attr]
            for item in ops:  # type: ignore[union-attr]
                if item["action"] in ("replace", "remove") and item["old_text"] in mine:
                    mine.remove(item["old_text"])
                if item["action"] in ("add", "replace"):
                    mine.append(str(item["content"]).split(" ", 1)[0])
    provider.shutdown()
    Path(results_path).write_text(json.dumps(results), encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# adds: N distinct entries at once (the issue-2 requirement)
# --------------------------------------------------------------------------------------------------
def adds(home: str, worker: int, n: int, go_file: str) -> None:
    from ironmem.core.builtin import BuiltinMemoryProvider

    provider = BuiltinMemoryProvider(home, memory_char_limit=HUGE)
    _wait_for(go_file, worker)
    for i in range(n):
        result = json.loads(provider.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": f"process {worker} entry {i}"}))
        if not result.get("success"):
            raise SystemExit(f"add failed: {result}")
    provider.shutdown()


# --------------------------------------------------------------------------------------------------
# zygote: forks writer children on demand, so 100 kills cost milliseconds each, not an interpreter start
# --------------------------------------------------------------------------------------------------
def _memory_writer(home: str, ops_path: str, start: int, progress: str) -> None:
    """Apply ops[start:] through the memory tool; after each one, record how many are done."""
    from ironmem.core.builtin import BuiltinMemoryProvider

    ops = json.loads(Path(ops_path).read_text(encoding="utf-8"))
    provider = BuiltinMemoryProvider(home, memory_char_limit=HUGE, user_char_limit=HUGE)
    fd = os.open(progress, os.O_WRONLY | os.O_CREAT, 0o644)
    for k in range(start, len(ops)):
        result = json.loads(provider.handle_tool_call("memory", ops[k]))
        if not result.get("success"):
            os.write(2, f"op {k} failed: {result}\n".encode())
            os._exit(3)
        os.pwrite(fd, f"{k + 1:>10}".encode(), 0)
    os._exit(0)


def _turn_writer(db: str, start: int, progress: str) -> None:
    """Add turns start, start+1, ... each holding a unique word ``zq<k>x``; record how many are done."""
    from ironmem.core.builtin.index import SearchIndex

    index = SearchIndex(Path(db))
    fd = os.open(progress, os.O_WRONLY | os.O_CREAT, 0o644)
    k = start
    while True:
        index.add_turn("crash", f"turn zq{k}x about kayaks and 爬山", f"reply {k} " + "lorem ipsum " * 20, user_id=None)
        k += 1
        os.pwrite(fd, f"{k:>10}".encode(), 0)


def _kill_self_at_replace(home: str) -> None:
    """Write once, dying by SIGKILL at the exact moment the temp file would replace MEMORY.md."""
    from ironmem.core.builtin import BuiltinMemoryProvider, store

    provider = BuiltinMemoryProvider(home)

    def die(*_: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    store.os.replace = die  # type: ignore[assignment]  # only in this doomed child
    provider.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "never lands"})
    os._exit(4)  # not reached


def zygote() -> None:
    """Serve commands from stdin, one per line, answering on stdout:

    ``memory HOME OPS START PROGRESS`` / ``turns DB START PROGRESS`` / ``die_at_replace HOME`` -> ``pid <pid>``
    (a forked child starts the job), ``wait`` -> ``status <raw wait status>`` of that child, ``quit``.
    """
    import ironmem.core.builtin  # noqa: F401  - imported once here, inherited by every fork

    child = 0
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "quit":
            return
        if cmd == "wait":
            _, status = os.waitpid(child, 0)
            print(f"status {status}", flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            try:
                if cmd == "memory":
                    _memory_writer(args[0], args[1], int(args[2]), args[3])
                elif cmd == "turns":
                    _turn_writer(args[0], int(args[1]), args[2])
                elif cmd == "die_at_replace":
                    _kill_self_at_replace(args[0])
            finally:
                os._exit(5)
        child = pid
        print(f"pid {pid}", flush=True)


# --------------------------------------------------------------------------------------------------
# fsize: a real failing write (the kernel refuses to grow files past RLIMIT_FSIZE: EFBIG)
# --------------------------------------------------------------------------------------------------
def fsize(home: str) -> None:
    from ironmem import MemoryManager

    manager = MemoryManager(home=home)
    session = manager.start_session("fsize")
    first = json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Small fact."}))
    path = Path(home) / "MEMORY.md"
    before = path.read_bytes()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 64, resource.RLIM_INFINITY))
    big = "A long note about the staging server. " * 30
    second = json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": big}))
    print(json.dumps({"first": first, "second": second, "before": before.decode("utf-8"),
                      "after": path.read_bytes().decode("utf-8"),
                      "leftovers": sorted(p.name for p in Path(home).iterdir() if p.name.startswith(".ironmem-tmp"))}))


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "mixed":
        home, worker, n_ops, seed, log, results, go = args
        mixed(home, int(worker), int(n_ops), int(seed), log, results, go)
    elif mode == "adds":
        home, worker, n, go = args
        adds(home, int(worker), int(n), go)
    elif mode == "zygote":
        zygote()
    elif mode == "fsize":
        fsize(args[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
