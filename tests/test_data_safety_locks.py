"""ironmem and Hermes on one memory folder: the same lock, taken the same way, so neither loses a write.

Hermes's memory tool locks ``memories/MEMORY.md.lock`` with ``fcntl.flock(LOCK_EX)`` (read in
NousResearch/hermes-agent, tools/memory_tool.py). The other process here is a real second Python process that
takes that lock exactly that way (tests/data_safety_helpers/hermes_style_writer.py).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.builtin.store import parse_entries

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fcntl.flock is POSIX")

HELPERS = Path(__file__).resolve().parent / "data_safety_helpers"


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.005)


def test_ironmem_takes_hermes_lock_file_beside_the_memory_file(home: Path) -> None:
    with MemoryManager(home=home) as manager:
        assert manager.builtin.files["memory"].lock_path == home / "MEMORY.md.lock"
        assert manager.builtin.files["user"].lock_path == home / "USER.md.lock"
        result = json.loads(manager.start_session().handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "x"}))
        assert result["success"]
    assert (home / "MEMORY.md.lock").exists()
    assert stat.S_IMODE((home / "MEMORY.md.lock").stat().st_mode) == 0o600


def test_a_write_waits_while_another_process_holds_hermes_lock(home: Path, tmp_path: Path) -> None:
    ready = tmp_path / "locked"
    with MemoryManager(home=home) as manager:
        # started before the lock is taken, so a slow start on a loaded machine cannot eat the wait
        session = manager.start_session()
        holder = subprocess.Popen(
            [sys.executable, str(HELPERS / "hermes_style_writer.py"), "hold", str(home), "1.5", str(ready)]
        )
        try:
            _wait_for(ready)
            started = time.time()
            result = json.loads(session.handle_tool_call(
                "memory", {"action": "add", "target": "memory", "content": "written after Hermes let go"}))
            finished = time.time()
        finally:
            holder.wait(timeout=30)
    assert holder.returncode == 0
    released = float(ready.with_suffix(".released").read_text())
    assert result["success"] is True
    assert started < released, "the holder let go before the write began: the test did not exercise the wait"
    assert finished >= released, f"the write finished {released - finished:.3f}s before Hermes let go of its lock"
    assert (home / "MEMORY.md").read_text(encoding="utf-8") == "written after Hermes let go"


def test_200_interleaved_writes_by_a_hermes_style_process_and_ironmem_lose_nothing(home: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    ready_h, ready_i = tmp_path / "ready-h", tmp_path / "ready-i"
    hermes = subprocess.Popen([sys.executable, str(HELPERS / "hermes_style_writer.py"), "add", str(home), "100",
                               "hermes note", str(ready_h), str(go)])
    ours = subprocess.Popen([sys.executable, str(HELPERS / "ironmem_writer.py"), str(home), "100", "ironmem note",
                             str(ready_i), str(go)], stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ready_h)
        _wait_for(ready_i)
        go.write_text("go")
        assert hermes.wait(timeout=240) == 0
        assert ours.wait(timeout=240) == 0, ours.stderr.read() if ours.stderr else ""
    finally:
        for proc in (hermes, ours):
            if proc.poll() is None:
                proc.kill()
    entries = parse_entries((home / "MEMORY.md").read_text(encoding="utf-8"))
    expected = {f"hermes note {i}" for i in range(100)} | {f"ironmem note {i}" for i in range(100)}
    assert set(entries) == expected
    assert len(entries) == 200
    # Each writer's own entries are in its own order: the writes really interleaved under one lock.
    hermes_order = [e for e in entries if e.startswith("hermes")]
    assert hermes_order == [f"hermes note {i}" for i in range(100)]
    positions = [i for i, e in enumerate(entries) if e.startswith("hermes")]
    assert positions != list(range(100)) and positions != list(range(100, 200)), "the writers did not interleave"


def test_threads_of_one_process_share_the_lock_without_losing_writes(home: Path) -> None:
    with MemoryManager(home=home, memory_char_limit=100_000) as manager:
        session = manager.start_session()

        def add(prefix: str) -> None:
            for i in range(30):
                result = json.loads(session.handle_tool_call(
                    "memory", {"action": "add", "target": "memory", "content": f"{prefix} {i}"}))
                assert result["success"], result

        threads = [threading.Thread(target=add, args=(f"t{n}",)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(manager.builtin.files["memory"].read().entries) == 120


def test_lock_file_symlink_is_refused_and_nothing_is_written(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("do not touch", encoding="utf-8")
    (home / "MEMORY.md.lock").symlink_to(outside)
    with MemoryManager(home=home) as manager:
        result = json.loads(manager.start_session().handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "x"}))
    assert result["success"] is False and "symlink" in result["error"] and "Nothing was written" in result["error"]
    assert outside.read_text(encoding="utf-8") == "do not touch"
    assert not (home / "MEMORY.md").exists()


def test_loose_existing_lock_file_is_tightened(home: Path) -> None:
    lock = home / "MEMORY.md.lock"
    lock.write_text("", encoding="utf-8")
    os.chmod(lock, 0o664)
    with MemoryManager(home=home) as manager:
        manager.start_session().handle_tool_call("memory", {"action": "add", "target": "memory", "content": "x"})
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
