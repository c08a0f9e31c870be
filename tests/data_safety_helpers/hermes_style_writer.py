"""A stand-in for a Hermes process writing its memory folder, used by tests/test_data_safety_locks.py.

It takes the lock exactly as Hermes's ``MemoryStore._file_lock`` does (verified in NousResearch/hermes-agent,
tools/memory_tool.py): ``open(<file>.lock, "a+")`` beside the memory file, then ``fcntl.flock(fd, LOCK_EX)``;
under it, it re-reads the file, splits on ``"\\n§\\n"``, de-duplicates, appends and writes a temp file that
replaces the original (``os.replace``). Written for these tests; no Hermes code is copied.

Usage:
    python hermes_style_writer.py add  <memory dir> <count> <prefix> <ready file> <go file>
    python hermes_style_writer.py hold <memory dir> <seconds> <ready file>

``hold`` writes ``<ready file>.released`` (the ``time.time()`` at which it lets go) just before it unlocks.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

DELIMITER = "\n§\n"


def _lock(path: Path):  # type: ignore[no-untyped-def]
    handle = open(path.with_suffix(path.suffix + ".lock"), "a+", encoding="utf-8")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def _unlock(handle) -> None:  # type: ignore[no-untyped-def]
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def _add(path: Path, entry: str) -> None:
    handle = _lock(path)
    try:
        raw = path.read_text(encoding="utf-8") if path.exists() else ""
        entries = list(dict.fromkeys(e.strip() for e in raw.split(DELIMITER) if e.strip()))
        if entry not in entries:
            entries.append(entry)
        fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=".mem_", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(DELIMITER.join(entries))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        _unlock(handle)


def main() -> None:
    mode, folder = sys.argv[1], Path(sys.argv[2])
    memory = folder / "MEMORY.md"
    if mode == "hold":
        seconds, ready = float(sys.argv[3]), Path(sys.argv[4])
        handle = _lock(memory)
        ready.write_text("locked")
        time.sleep(seconds)
        ready.with_suffix(".released").write_text(repr(time.time()))
        _unlock(handle)
        return
    count, prefix, ready, go = int(sys.argv[3]), sys.argv[4], Path(sys.argv[5]), Path(sys.argv[6])
    ready.write_text("ready")
    while not go.exists():
        time.sleep(0.001)
    for i in range(count):
        _add(memory, f"{prefix} {i}")
        time.sleep(0.01)  # an agent between two memory calls: gives the other process its turns at the lock


if __name__ == "__main__":
    main()
