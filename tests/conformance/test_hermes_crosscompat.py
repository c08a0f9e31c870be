"""Hermes beside ironmem on one memory folder while entries move to the archive (issue 37).

A Hermes process keeps reading and writing ``MEMORY.md`` and ``USER.md`` as it always does (its lock on
``<file>.lock``, its parse on the ``§`` lines); ironmem, with ``overflow="archive"``, moves entries out of a full
file into ``MEMORY.archive.jsonl`` beside it. The Hermes side is the stand-in of ``tests/data_safety_helpers/
hermes_style_writer.py`` (Hermes's lock and read-modify-write, verified against NousResearch/hermes-agent) and, in
this process, Hermes's parse and replace as its ``MemoryStore`` does them (re-implemented, not copied).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ironmem import MemoryManager

HELPERS = Path(__file__).resolve().parents[1] / "data_safety_helpers"
DELIMITER = "\n§\n"


def hermes_read(path: Path) -> list[str]:
    """Hermes's load: split on the delimiter, strip, drop empties, de-duplicate."""
    raw = path.read_text(encoding="utf-8") if path.exists() else ""
    return list(dict.fromkeys(e.strip() for e in raw.split(DELIMITER) if e.strip()))


def hermes_replace(path: Path, old_text: str, content: str) -> None:
    """Hermes's replace under its lock: the unique entry holding ``old_text`` becomes ``content``."""
    with open(path.with_suffix(path.suffix + ".lock"), "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = hermes_read(path)
        (index,) = [i for i, e in enumerate(entries) if old_text in e]
        entries[index] = content
        fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=".mem_", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(DELIMITER.join(entries))
        os.replace(tmp, path)
        fcntl.flock(lock, fcntl.LOCK_UN)


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_hermes_keeps_writing_while_ironmem_moves_entries_to_the_archive(tmp_path: Path) -> None:
    home = tmp_path / "memories"
    home.mkdir()
    go, ready = tmp_path / "go", tmp_path / "ready"
    hermes = subprocess.Popen([sys.executable, str(HELPERS / "hermes_style_writer.py"), "add", str(home), "60",
                               "hermes note", str(ready), str(go)])
    with MemoryManager(home=home, memory_char_limit=400) as manager:
        try:
            _wait_for(ready)
            go.write_text("go")
            for s in range(12):  # 60 writes over 12 sessions, the file full most of the time
                session = manager.start_session(f"s{s}")
                for i in range(5):
                    result = json.loads(session.handle_tool_call(
                        "memory", {"action": "add", "target": "memory", "content": f"ironmem fact {s}-{i}"}))
                    assert result["success"], result
                session.end()
            assert hermes.wait(timeout=240) == 0
        finally:
            if hermes.poll() is None:
                hermes.kill()
        one_more = manager.start_session("after")  # a write after Hermes's last one: the file is brought in line
        assert json.loads(one_more.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "ironmem fact last"}))["success"]
        live = list(manager.builtin.state("memory").entries)
        log = manager.builtin.archive_state("memory")
        archived = [r.text for r in log.archived_now(live)]
        merged = {r.text for r in log.superseded_now(live)}
    expected = ({f"hermes note {i}" for i in range(60)} | {f"ironmem fact {s}-{i}" for s in range(12) for i in range(5)}
                | {"ironmem fact last"})
    assert merged == set()  # no two of these notes are near-duplicates
    assert set(live) | set(archived) == expected  # nothing lost, by either writer
    assert not set(live) & set(archived)
    assert any(a.startswith("hermes note") for a in archived), "no Hermes entry moved: the test exercised nothing"
    # Hermes reads exactly the live entries: the file is plain Hermes format, the archive is a file of its own
    assert hermes_read(home / "MEMORY.md") == live
    assert "ironmem-archive" not in (home / "MEMORY.md").read_text(encoding="utf-8")
    assert (home / "MEMORY.archive.jsonl").is_file()


def test_hermes_edits_after_a_move_and_ironmem_reads_them(tmp_path: Path) -> None:
    home = tmp_path / "memories"
    with MemoryManager(home=home, memory_char_limit=100) as manager:
        first = manager.start_session("s1")
        for fact in ("The deploy target is Ubuntu 22.04", "Staging runs Postgres 15", "CI uses two workers"):
            first.handle_tool_call("memory", {"action": "add", "target": "memory", "content": fact})
        first.end()
        second = manager.start_session("s2")
        moved = json.loads(second.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "Releases go out on Thursdays"}))
        assert moved["archived"], moved
        # Hermes, unaware of the archive, replaces an entry it sees and adds a note of its own
        visible = hermes_read(home / "MEMORY.md")
        hermes_replace(home / "MEMORY.md", "Thursdays", "Releases go out on Fridays")
        with open(home / "MEMORY.md", "a", encoding="utf-8") as handle:  # Hermes's add, as its file shows it
            handle.write(DELIMITER + "Hermes added this note")
        third = manager.start_session("s3")
        block = third.system_prompt_block()
        assert "Releases go out on Fridays" in block and "Hermes added this note" in block
        assert "Thursdays" not in block
        found = json.loads(third.handle_tool_call("session_search", {"query": "deploy target Ubuntu"}))["results"]
        assert found and found[0]["status"] == "archived"  # what moved is still found
        assert len(visible) == len(hermes_read(home / "MEMORY.md")) - 1
