"""Reliability: concurrent writers, SIGKILL at random points, crashed index writes, failing disks, hand edits.

Every test uses real processes (tests/reliability/worker.py), real files and real SQLite. Bounded in time: the
whole module runs in well under a minute on 2 cores (the slowest parts are fsyncs).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.builtin import BuiltinMemoryProvider, parse_entries
from ironmem.core.builtin import store as store_module
from ironmem.core.builtin.index import SearchIndex
from ironmem.core.builtin.store import MemoryFile
from ironmem.core.builtin.tools import Operation, apply_operation

pytestmark = pytest.mark.skipif(os.name != "posix", reason="uses fork, SIGKILL and RLIMIT_FSIZE")

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "reliability" / "worker.py"
HUGE = 10_000_000


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start_together(procs: list[subprocess.Popen[bytes]], go: Path, n: int) -> None:
    """Wait until every worker has imported ironmem and opened the store, then let them all go at once."""
    deadline = time.monotonic() + 90
    while sum(1 for i in range(n) if Path(f"{go}.ready.{i}").exists()) < n:
        failed = [p.args for p in procs if p.poll() not in (None, 0)]
        assert not failed, f"a worker died before starting: {failed}"
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.01)
    go.touch()


def _entries(path: Path) -> list[str]:
    """The file's entries; raises if the file is not valid UTF-8 (a torn write would show up here)."""
    return parse_entries(path.read_bytes().decode("utf-8")) if path.exists() else []


def _temp_files(home: Path) -> list[Path]:
    return sorted(home.glob(".ironmem-tmp-*"))


# --------------------------------------------------------------------------------------------------
# Concurrency
# --------------------------------------------------------------------------------------------------
def test_eight_processes_mixed_writes_equal_a_serial_replay_in_lock_order(tmp_path: Path) -> None:
    """8 processes x 100 add / replace / remove / batch operations on one store, all started at once.

    Each worker logs every operation from inside the library's own lock (what it read under the lock and what
    was on disk before releasing it), so the log order is the lock order. Checked: each operation saw exactly
    what the previous one left (no lost update, nobody wrote outside the lock); replaying the log serially
    through the real tool in a fresh store gives the same result for every operation, the same state after
    every operation and byte-identical final files; nothing is duplicated.
    """
    home, go, log = tmp_path / "home", tmp_path / "go", tmp_path / "lock-order.jsonl"
    home.mkdir()
    n_workers, n_ops = 8, 100
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "mixed", str(home), str(i), str(n_ops), "11", str(log),
             str(tmp_path / f"results-{i}.json"), str(go)],
            env=_env(),
        )
        for i in range(n_workers)
    ]
    try:
        _start_together(procs, go, n_workers)
        for p in procs:
            assert p.wait(timeout=150) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()

    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(records) == n_workers * n_ops  # every operation took the lock exactly once
    outcome = {}
    for i in range(n_workers):
        for r in json.loads((tmp_path / f"results-{i}.json").read_text(encoding="utf-8")):
            outcome[(r["worker"], r["seq"])] = r["success"]

    for name in ("MEMORY.md", "USER.md"):
        chain = [r for r in records if r["file"] == name]
        assert chain and chain[0]["before"] == []
        for previous, current in zip(chain, chain[1:]):
            assert current["before"] == previous["after"], f"{name}: an operation did not see the one before it"
        assert _entries(home / name) == chain[-1]["after"]
        switches = sum(1 for a, b in zip(chain, chain[1:]) if a["worker"] != b["worker"])
        assert switches >= 40 and len({r["worker"] for r in chain}) == n_workers, "the workers barely interleaved"
        print(f"{name}: {len(chain)} operations, {switches} hand-overs between workers")

    # Serial replay, in lock order, through the real tool in a fresh store.
    replay_home = tmp_path / "replay"
    replay = BuiltinMemoryProvider(replay_home, memory_char_limit=HUGE, user_char_limit=HUGE)
    successes = failures = 0
    for r in records:
        result = json.loads(replay.handle_tool_call("memory", r["op"]))
        assert result["success"] == outcome[(r["worker"], r["seq"])], f"different outcome on replay: {r['op']}"
        assert list(replay.files["memory" if r["file"] == "MEMORY.md" else "user"].read().entries) == r["after"]
        successes += result["success"]
        failures += not result["success"]
    replay.shutdown()
    assert successes > 400 and failures > 10  # both paths exercised (failures: entries another worker removed)
    for name in ("MEMORY.md", "USER.md"):
        assert (home / name).read_bytes() == (replay_home / name).read_bytes()
        final = _entries(home / name)
        assert len(final) == len(set(final)), f"duplicated entry in {name}"
    assert _temp_files(home) == []


def test_four_processes_add_fifty_entries_each_and_all_200_are_there(tmp_path: Path) -> None:
    """Issue 2: 4 processes each add 50 distinct entries to the same MEMORY.md at once; none is lost."""
    home, go = tmp_path / "home", tmp_path / "go"
    home.mkdir()
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "adds", str(home), str(i), "50", str(go)], env=_env())
        for i in range(4)
    ]
    try:
        _start_together(procs, go, 4)
        for p in procs:
            assert p.wait(timeout=120) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    entries = _entries(home / "MEMORY.md")
    expected = {f"process {w} entry {i}" for w in range(4) for i in range(50)}
    assert len(entries) == 200 and set(entries) == expected
    # And the search index agrees with the file once a reader syncs it.
    provider = BuiltinMemoryProvider(home, memory_char_limit=HUGE)
    provider.state("memory")
    hits = provider.index.search("process entry", kinds=("memory",), limit=20)
    assert len(hits) == 20 and all(h.text in expected for h in hits)
    provider.shutdown()


# --------------------------------------------------------------------------------------------------
# Crash safety (SIGKILL)
# --------------------------------------------------------------------------------------------------
class Zygote:
    """A worker process that forks writer children on command, so each kill costs milliseconds."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=_env(),
        )

    def _ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer, f"zygote gave no answer to {line!r}"
        return answer

    def spawn(self, *args: object) -> int:
        return int(self._ask(" ".join(str(a) for a in args)).split()[1])

    def wait(self) -> int:
        return int(self._ask("wait").split()[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


def _killed(status: int) -> bool:
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _op_sequence(n: int, seed: int) -> tuple[list[dict[str, str]], list[tuple[list[str], list[str]]]]:
    """``n`` operations that are all valid in order, and the (MEMORY, USER) entries after each prefix."""
    rng = random.Random(seed)
    ops: list[dict[str, str]] = []
    state = {"memory": [], "user": []}
    states = [([], [])]
    for k in range(n):
        target = "memory" if rng.random() < 0.7 else "user"
        entries = state[target]
        roll = rng.random()
        text = f"e{k}: " + " ".join(rng.choice(["deploy", "tea", "爬山", "budget", "notes", "Lisbon"]) for _ in range(4))
        if roll < 0.5 or len(entries) < 3:
            op = {"action": "add", "target": target, "content": text}
        elif roll < 0.8:
            op = {"action": "replace", "target": target, "old_text": rng.choice(entries).split(" ", 1)[0],
                  "content": text}
        else:
            op = {"action": "remove", "target": target, "old_text": rng.choice(entries).split(" ", 1)[0]}
        state[target], changed = apply_operation(
            entries, Operation(op["action"], target, op.get("content", ""), op.get("old_text", "")))
        assert changed
        ops.append(op)
        states.append((list(state["memory"]), list(state["user"])))
    return ops, states


def _wait_for_progress(progress: Path, target: int, pid: int, timeout: float = 60.0) -> None:
    """Block until the writer reports at least ``target`` applied operations (it rewrites ``progress`` in place)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = progress.read_text().strip()
        if text and int(text) >= target:
            return
        time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the writer did not reach operation {target} within {timeout:g}s")


def test_writer_killed_at_random_points_100_times_leaves_valid_files(tmp_path: Path, zygote: Zygote) -> None:
    """SIGKILL a writer 100 times at random moments; after every kill MEMORY.md and USER.md parse, and equal
    the state before or after the write in progress; stray temp files are cleaned at the next open."""
    home = tmp_path / "home"
    home.mkdir()
    ops, states = _op_sequence(3000, seed=5)
    ops_path, progress = tmp_path / "ops.json", tmp_path / "progress"
    ops_path.write_text(json.dumps(ops), encoding="utf-8")
    rng = random.Random(99)
    done = 0  # operations applied so far (the index into states)
    strays_seen = 0
    for _ in range(100):
        progress.write_text(f"{done:>10}")
        pid = zygote.spawn("memory", home, ops_path, done, progress)
        # Progress, not a sleep, decides when to kill: wait until the writer has applied a random number of
        # operations, then kill it a random instant into the next one. A loaded machine only makes this slower.
        _wait_for_progress(progress, done + rng.randint(1, 12), pid)
        time.sleep(rng.uniform(0, 0.002))
        os.kill(pid, signal.SIGKILL)
        assert _killed(zygote.wait()), "the writer finished or failed instead of being killed"
        reported = int(progress.read_text())
        now = (_entries(home / "MEMORY.md"), _entries(home / "USER.md"))
        assert now in (states[reported], states[reported + 1]), f"torn state after op {reported}"
        done = reported if now == states[reported] else reported + 1
        strays = _temp_files(home)
        if strays:
            strays_seen += 1
            MemoryFile(home / "MEMORY.md", limit=HUGE)  # the next open (the lock is free: the writer is dead)
            MemoryFile(home / "USER.md", limit=HUGE)
            assert _temp_files(home) == [], f"not cleaned at open: {strays}"
    assert done >= 100, "every round waits for at least one applied operation"
    assert done < len(ops), "the sequence ran out: kills landed after the writer had finished"
    # The entry index catches up with the files after all those kills.
    provider = BuiltinMemoryProvider(home, memory_char_limit=HUGE, user_char_limit=HUGE)
    provider.state("memory")
    rows = provider.index._conn.execute("SELECT text FROM entries WHERE target = 'memory'").fetchall()
    assert sorted(r[0] for r in rows) == sorted(states[done][0])
    provider.shutdown()
    print(f"{done} operations across 100 kills; stray temp files after {strays_seen} kills")


def test_kill_between_temp_write_and_replace(tmp_path: Path, zygote: Zygote) -> None:
    """The worst moment, deterministically: the temp file is written and fsynced, then the process dies."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "MEMORY.md").write_text("Old fact.\n§\nAnother old fact.", encoding="utf-8")
    before = (home / "MEMORY.md").read_bytes()
    zygote.spawn("die_at_replace", home)
    assert _killed(zygote.wait())
    assert (home / "MEMORY.md").read_bytes() == before
    strays = _temp_files(home)
    assert len(strays) == 1 and "never lands" in strays[0].read_text(encoding="utf-8")
    manager = MemoryManager(home=home)  # the next open cleans it
    assert _temp_files(home) == []
    session = manager.start_session()
    assert json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "New."}))[
        "success"]
    assert _entries(home / "MEMORY.md") == ["Old fact.", "Another old fact.", "New."]
    manager.close()


# --------------------------------------------------------------------------------------------------
# The turn index: turn row and FTS row land together or not at all
# --------------------------------------------------------------------------------------------------
def _index_state(db: Path) -> tuple[int, int, int, int]:
    """(turns, FTS documents, max turn id, turns_indexed meta), read with plain sqlite3 (no repair on open)."""
    conn = sqlite3.connect(db)
    try:
        turns, max_id = conn.execute("SELECT count(*), coalesce(max(id), 0) FROM turns").fetchone()
        docs = conn.execute("SELECT count(*) FROM turns_fts_docsize").fetchone()[0]
        meta = conn.execute("SELECT value FROM meta WHERE key = 'turns_indexed'").fetchone()
        return int(turns), int(docs), int(max_id), int(meta[0]) if meta else 0
    finally:
        conn.close()


def test_killed_turn_writer_leaves_turn_and_fts_row_together(tmp_path: Path, zygote: Zygote) -> None:
    db, progress = tmp_path / "search.db", tmp_path / "progress"
    SearchIndex(db).close()
    rng = random.Random(3)
    written = 0
    for _ in range(30):
        progress.write_text(f"{written:>10}")
        pid = zygote.spawn("turns", db, written, progress)
        time.sleep(rng.uniform(0.002, 0.03))
        os.kill(pid, signal.SIGKILL)
        assert _killed(zygote.wait())
        reported = int(progress.read_text())
        turns, docs, max_id, meta = _index_state(db)
        assert turns in (reported, reported + 1)
        assert docs == turns and max_id == turns and meta == max_id, "turn row and index row split by a kill"
        conn = sqlite3.connect(db)
        last = conn.execute("SELECT rowid FROM turns_fts WHERE turns_fts MATCH ?", (f'"zq{turns - 1}x"',)).fetchall()
        ghost = conn.execute("SELECT rowid FROM turns_fts WHERE turns_fts MATCH ?", (f'"zq{turns}x"',)).fetchall()
        conn.close()
        assert (turns == 0 or last == [(turns,)]) and ghost == []
        written = turns
    assert written > 10
    index = SearchIndex(db)  # opens without a rebuild: meta agrees
    assert [h.text.split()[2] for h in index.search(f"zq{written - 1}x", kinds=("turn",))] == [f"zq{written - 1}x"]
    index.close()


def test_index_rebuilds_when_a_turn_row_has_no_index_row(tmp_path: Path) -> None:
    """A crash between the two writes (possible only without the transaction, e.g. an older version or a tool
    writing the table directly): the meta counter disagrees, and the next open rebuilds the index."""
    db = tmp_path / "search.db"
    index = SearchIndex(db)
    index.add_turn("s", "the falcon has landed", "ok", user_id=None)
    index.close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO turns(session_id, user_id, ts, user, assistant) VALUES ('s', NULL, 0, ?, 'noted')",
                 ("the heron has landed",))
    conn.commit()
    conn.close()
    assert _index_state(db) == (2, 1, 2, 1)
    index = SearchIndex(db)
    assert _index_state(db) == (2, 2, 2, 2)
    assert [h.text for h in index.search("heron", kinds=("turn",))] == ["User: the heron has landed\nAssistant: noted"]
    index.close()


def test_index_rebuilds_when_it_holds_a_turn_that_is_gone(tmp_path: Path) -> None:
    db = tmp_path / "search.db"
    index = SearchIndex(db)
    for word in ("falcon", "heron", "osprey"):
        index.add_turn("s", f"the {word} has landed", "ok", user_id=None)
    index.close()
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM turns WHERE id = 3")  # the newest turn removed by hand: meta now says 3, max id 2
    conn.commit()
    conn.close()
    index = SearchIndex(db)
    assert index.search("osprey", kinds=("turn",)) == []
    assert _index_state(db) == (2, 2, 2, 2)
    assert [h.text for h in index.search("falcon", kinds=("turn",))] == ["User: the falcon has landed\nAssistant: ok"]
    index.close()


# --------------------------------------------------------------------------------------------------
# Failing disks
# --------------------------------------------------------------------------------------------------
def test_real_failing_write_file_size_limit(tmp_path: Path) -> None:
    """The kernel refuses to grow the temp file (RLIMIT_FSIZE -> EFBIG): a clear JSON error, old file intact."""
    home = tmp_path / "home"
    out = subprocess.run([sys.executable, str(WORKER), "fsize", str(home)], capture_output=True, text=True,
                         timeout=60, env=_env())
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["first"]["success"]
    second = result["second"]
    assert second["success"] is False
    assert "File too large" in second["error"] and "MEMORY.md" in second["error"]
    assert "previous file is intact" in second["error"]
    assert result["after"] == result["before"] == "Small fact."
    assert result["leftovers"] == []


FAULTS = {
    "disk full at rename": ("os", "replace", errno.ENOSPC, "No space left on device"),
    "disk full at fsync": ("os", "fsync", errno.ENOSPC, "No space left on device"),
    "read-only file system": ("tempfile", "mkstemp", errno.EROFS, "Read-only file system"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_failing_write_gives_clear_error_and_keeps_old_file(
    fault: str, manager: MemoryManager, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated in-process (as root, permission bits do not stop writes): the tool answers with a JSON error
    naming the file and the OS error, the old bytes stay, no temp file is left, and the next write works."""
    session = manager.start_session("disk")
    assert json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Kept."}))[
        "success"]
    before = (home / "MEMORY.md").read_bytes()
    module, name, code, text = FAULTS[fault]
    target = store_module.os if module == "os" else importlib.import_module("tempfile")
    real = getattr(target, name)
    armed = {"on": True}

    def failing(*args: object, **kwargs: object) -> object:
        if armed["on"]:
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, failing)
    raw = session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Lost?"})
    result = json.loads(raw)
    assert result["success"] is False
    assert text in result["error"] and str(home / "MEMORY.md") in result["error"]
    assert "previous file is intact" in result["error"]
    assert (home / "MEMORY.md").read_bytes() == before
    assert _temp_files(home) == []
    armed["on"] = False
    assert json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Later."}))[
        "success"]
    assert _entries(home / "MEMORY.md") == ["Kept.", "Later."]


def test_unwritable_state_folder_gives_clear_error(tmp_path: Path) -> None:
    """The lock cannot be created (here: a folder sits where Hermes's lock file MEMORY.md.lock goes, a real
    OS error)."""
    (tmp_path / "MEMORY.md.lock").mkdir()
    memory = MemoryFile(tmp_path / "MEMORY.md", limit=2200)
    with pytest.raises(Exception) as info:
        memory.update(lambda entries: entries + ["x"])
    assert type(info.value).__name__ == "MemoryFileError"
    assert "cannot lock" in str(info.value) and "must be writable" in str(info.value)
    assert not (tmp_path / "MEMORY.md").exists()


# --------------------------------------------------------------------------------------------------
# Hand edits while a session runs
# --------------------------------------------------------------------------------------------------
_EDITOR = r"""
import os, sys
path, mode = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()
text = text.replace("Standup at 9:30.", "Standup at 10:00.").replace("Deploys go through CI.\n§\n", "")
text += "\n§\nHand-written: prefer tabs."
if mode == "in-place":  # nano, VS Code: truncate and write
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
else:  # vim-style: write a new file and rename it over the old one
    with open(path + ".swp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".swp", path)
"""


@pytest.mark.parametrize("mode", ["in-place", "rename"])
def test_hand_edit_during_a_session_is_kept_and_shows_in_the_live_delta(tmp_path: Path, mode: str) -> None:
    home = tmp_path / "home"
    with MemoryManager(home=home) as manager:
        setup = manager.start_session("setup")
        for content in ("Deploys go through CI.", "Standup at 9:30.", "Uses Python 3.11."):
            setup.handle_tool_call("memory", {"action": "add", "target": "memory", "content": content})
        session = manager.start_session("live")
        frozen = session.system_prompt_block()
        # The user opens MEMORY.md in an editor (another process) and saves.
        subprocess.run([sys.executable, "-c", _EDITOR, str(home / "MEMORY.md"), mode], check=True, timeout=30)
        recall = session.prefetch("when is the standup?").fenced()
        assert "Standup at 10:00." in recall and "Hand-written: prefer tabs." in recall
        assert "removed - no longer true] Deploys go through CI." in recall
        # The agent writes next: it re-reads under the lock, so the user's edit survives and nothing comes back.
        result = json.loads(session.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "Agent note: release on Thursday."}))
        assert result["success"]
        assert _entries(home / "MEMORY.md") == [
            "Standup at 10:00.", "Uses Python 3.11.", "Hand-written: prefer tabs.", "Agent note: release on Thursday."]
        replaced = json.loads(session.handle_tool_call(
            "memory", {"action": "replace", "target": "memory", "old_text": "prefer tabs", "content": "Prefer spaces."}))
        assert replaced["success"]  # the hand-written entry is a normal entry for the tool
        assert session.system_prompt_block() == frozen  # rule 3 holds throughout
        next_session = manager.start_session("next")
        assert "Prefer spaces." in next_session.system_prompt_block()
        assert "Deploys go through CI." not in next_session.system_prompt_block()
