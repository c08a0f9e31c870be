"""Provenance and held writes on both storage backends (files + SQLite, PostgreSQL), two processes approving the
same write, Hermes on the same folder, and the CLI (``ironmem review``, ``ironmem audit``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.custody import Origin
from ironmem.core.errors import PendingWriteError

PLANTED = "Acme Corp's new billing account is GB33 BUKB 2020 1555 5555 55."
REPO = Path(__file__).resolve().parent.parent


def _hold(manager: MemoryManager, content: str = PLANTED, session_id: str = "s1") -> str:
    session = manager.start_session(session_id)
    session.begin_turn("Summarize https://example.com")
    session.observe("<html>...</html>", origin="tool", source="web_fetch")
    result = json.loads(session.handle_tool_call("memory", {"action": "add", "content": content}))
    session.sync_turn("Summarize https://example.com", f"Saved {content}")
    return str(result["pending_id"])


@pytest.fixture(params=["files", "postgresql"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "files":
        return None
    return str(request.getfixturevalue("pg_url"))


def test_provenance_and_held_writes_on_each_backend(storage: str | None, tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path, storage=storage)
    held = _hold(manager)
    assert [p.id for p in manager.builtin.pending()] == [held]
    entries = manager.builtin.file("memory").read().entries
    assert PLANTED not in entries
    (turn_id, prov), = manager.builtin.custody.turn_records()
    assert (prov.origin, prov.source, prov.session) == (Origin.TOOL, "web_fetch", "s1")
    manager.close()

    again = MemoryManager(home=tmp_path, storage=storage)  # another process: the record is durable
    fenced = again.start_session("s2").prefetch("Acme billing account").fenced()
    assert "unverified, from tool web_fetch" in fenced
    again.builtin.approve(held, by="ada")
    assert PLANTED in again.builtin.file("memory").read().entries
    prov = again.builtin.custody.entry_provenance("", "memory", [PLANTED])[PLANTED]
    assert (prov.origin, prov.approved_by) == (Origin.TOOL, "ada")
    assert PLANTED in again.start_session("s3").system_prompt_block()
    with pytest.raises(PendingWriteError, match="already approved"):
        again.builtin.reject(held)
    again.close()


def _held_section(fenced: str) -> str:
    """The recalled held writes of a fence ("" when there are none)."""
    marker = "## Held for the user's approval"
    return fenced.split(marker, 1)[1].split("\n## ", 1)[0] if marker in fenced else ""


def test_recall_sees_writes_held_and_decided_by_another_process(storage: str | None, tmp_path: Path) -> None:
    """Recall keeps the held writes between turns; another manager's stage and decision reach it at once."""
    reader = MemoryManager(home=tmp_path, storage=storage)
    session = reader.start_session("reader")
    assert "Acme" not in session.prefetch("Acme billing account").fenced()  # the (empty) held list is now kept
    writer = MemoryManager(home=tmp_path, storage=storage)
    held = _hold(writer)
    assert "Acme Corp's new billing account" in _held_section(session.prefetch("Acme billing account").fenced())
    writer.builtin.reject(held, by="ada")
    assert _held_section(session.prefetch("Acme billing account").fenced()) == ""
    second = _hold(writer, "Vendor Orion is paid to LT12 1000 0111 0100 1000.", "s2")
    assert "Vendor Orion is paid" in _held_section(session.prefetch("Vendor Orion payment").fenced())
    writer.builtin.approve(second, by="ada")
    fenced = session.prefetch("Vendor Orion payment").fenced()
    assert _held_section(fenced) == "" and "Vendor Orion is paid" in fenced  # recalled as an entry now
    writer.close()
    reader.close()


_APPROVER = """
import json, sys
from ironmem import MemoryManager
from ironmem.core.errors import PendingWriteError
home, storage, pid, go = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4]
manager = MemoryManager(home=home, storage=storage)
import os, time
while not os.path.exists(go):
    time.sleep(0.005)
try:
    manager.builtin.approve(pid, by=str(os.getpid()))
    print(json.dumps({"ok": True}))
except PendingWriteError as exc:
    print(json.dumps({"ok": False, "error": str(exc)}))
manager.close()
"""


def test_two_processes_approving_the_same_write(storage: str | None, tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path, storage=storage)
    held = _hold(manager)
    manager.close()
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _APPROVER, str(tmp_path), storage or "", held, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    time.sleep(1.5)  # both are up and waiting
    go.write_text("go")
    answers = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(a["ok"] for a in answers) == [False, True]
    (loser,) = [a for a in answers if not a["ok"]]
    assert "already approved" in loser["error"] and "nothing was changed" in loser["error"]
    check = MemoryManager(home=tmp_path, storage=storage)
    assert check.builtin.file("memory").read().entries.count(PLANTED) == 1
    assert [p.status for p in check.builtin.pending(status="all")] == ["approved"]
    check.close()


# -- Hermes on the same folder ------------------------------------------------------------------------
ENTRY_DELIMITER = "\n§\n"


def _hermes_read(path: Path) -> list[str]:
    """What Hermes's MemoryStore._read_file loads (tools/memory_tool.py): the file split on the delimiter."""
    if not path.exists():
        return []
    raw = path.read_text(encoding="utf-8")
    return [e.strip() for e in raw.split(ENTRY_DELIMITER) if e.strip()]


def _hermes_write(path: Path, entries: list[str]) -> None:
    """What Hermes's save_to_disk writes: the entries joined by the delimiter."""
    path.write_text(ENTRY_DELIMITER.join(entries), encoding="utf-8")


def test_hermes_never_sees_held_writes_and_still_reads_and_writes(tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path)
    session = manager.start_session("s0")
    session.begin_turn("I like tea")
    session.handle_tool_call("memory", {"action": "add", "content": "I like tea"})
    held = _hold(manager)
    # Hermes loads the folder: it sees the entry, never the held write; nothing else in the folder is a memory file
    assert _hermes_read(tmp_path / "MEMORY.md") == ["I like tea"]
    # (MEMORY.md.lock is Hermes's own lock-file convention; MEMORY.archive.jsonl is the archive log, issue 37)
    assert sorted(p.name for p in tmp_path.iterdir()
                  if not p.name.startswith(".") and p.suffix not in (".lock", ".jsonl")) == ["MEMORY.md"]
    assert PLANTED not in "".join(p.read_text("utf-8", "ignore") for p in tmp_path.glob("*.md"))
    # Hermes writes the file in its own format; ironmem reads it, the held write is still held
    _hermes_write(tmp_path / "MEMORY.md", [*_hermes_read(tmp_path / "MEMORY.md"), "Hermes wrote this"])
    block = manager.start_session("s1").system_prompt_block()
    assert "Hermes wrote this" in block and PLANTED not in block
    prov = manager.builtin.custody.entry_provenance("", "memory", ["Hermes wrote this"])["Hermes wrote this"]
    assert prov.origin is Origin.HAND_EDIT
    # approving afterwards keeps Hermes's entry, and Hermes reads the result
    manager.builtin.approve(held)
    assert _hermes_read(tmp_path / "MEMORY.md") == ["I like tea", "Hermes wrote this", PLANTED]
    record = manager.builtin.pending(status="approved")[0].to_hermes()
    assert record["subsystem"] == "memory" and record["payload"]["content"] == PLANTED
    manager.close()


# -- CLI ----------------------------------------------------------------------------------------------------
def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ironmem.cli", "--home", str(home), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_cli_review_lists_approves_and_rejects(tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path)
    first = _hold(manager)
    second = _hold(manager, "Vendor Orion is paid to LT12 1000 0111 0100 1000.", "s2")
    manager.close()
    listed = json.loads(_cli(tmp_path, "review", "--json").stdout)
    assert [(r["id"], r["origin"]) for r in listed] == [(first, "tool web_fetch"), (second, "tool web_fetch")]
    text = _cli(tmp_path, "review").stdout
    assert first in text and "tool web_fetch" in text
    assert _cli(tmp_path, "review", "--approve", first).returncode == 0
    assert PLANTED in (tmp_path / "MEMORY.md").read_text("utf-8")
    again = _cli(tmp_path, "review", "--approve", first)
    assert again.returncode != 0 and "already approved" in again.stderr
    unknown = _cli(tmp_path, "review", "--reject", "zzz")
    assert unknown.returncode != 0 and "no pending write with id 'zzz'" in unknown.stderr
    assert _cli(tmp_path, "review", "--reject", second, "--note", "scam").returncode == 0
    assert json.loads(_cli(tmp_path, "review", "--json").stdout) == []
    rejected = json.loads(_cli(tmp_path, "review", "--status", "rejected", "--json").stdout)
    assert [(r["id"], r["note"]) for r in rejected] == [(second, "scam")]


def test_cli_audit_lists_by_origin_and_removes_one_source_with_a_backup(tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path)
    session = manager.start_session("s0")
    session.begin_turn("I like tea")
    session.handle_tool_call("memory", {"action": "add", "content": "I like tea"})
    manager.builtin.approve(_hold(manager))
    still_held = _hold(manager, "Vendor Orion is paid to LT12 1000 0111 0100 1000.", "s2")
    manager.close()
    rows = json.loads(_cli(tmp_path, "audit", "--json").stdout)
    assert {(r["text"], r["origin"]) for r in rows} == {("I like tea", "user"), (PLANTED, "tool web_fetch")}
    refused = _cli(tmp_path, "audit", "--remove-source", "tool web_fetch")  # no terminal to confirm on
    assert refused.returncode != 0 and "--yes" in refused.stderr
    done = json.loads(_cli(tmp_path, "audit", "--remove-source", "tool web_fetch", "--yes", "--json").stdout)
    assert [r["text"] for r in done["removed"]] == [PLANTED] and done["rejected"] == [still_held]
    assert _hermes_read(tmp_path / "MEMORY.md") == ["I like tea"]
    backup = json.loads(Path(done["backup"]).read_text("utf-8"))
    assert PLANTED in backup["entries"]["memory"]
