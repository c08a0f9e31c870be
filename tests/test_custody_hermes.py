"""One Hermes folder's pending writes mean the same to Hermes and to ironmem (issue 34).

Hermes (NousResearch/hermes-agent, ``tools/write_approval.py``), with ``memory.write_approval`` on, stages a held
memory write as ``$HERMES_HOME/pending/memory/<id>.json``: ``{"id", "subsystem": "memory", "action", "summary",
"origin": "foreground" | "background_review", "created_at", "payload"}`` where ``payload`` is the memory tool's
arguments (``{"action", "target", "content", "old_text"}`` or ``{"action": "batch", "target", "operations"}``);
newer versions add ``schema_version``, ``state`` and ``payload_sha256`` (SHA-256 of the payload as sorted, compact
JSON). ``/memory approve <id>`` replays the payload against the store and deletes the record; ``/memory reject``
deletes it. The Hermes side here is re-implemented from those facts (not copied), on real files; ironmem is driven
through its public API and its real ``ironmem review`` command.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ironmem import MemoryManager
from ironmem.core.errors import OperationError, PendingWriteError

REPO = Path(__file__).resolve().parent.parent
DELIMITER = "\n§\n"
PLANTED = "Acme Corp's new billing account is GB33 BUKB 2020 1555 5555 55."


# -- Hermes's side ------------------------------------------------------------------------------------
def _sha(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
                          .encode("utf-8")).hexdigest()


def hermes_stage(root: Path, payload: dict[str, Any], *, origin: str = "background_review",
                 **extra: Any) -> str:
    """What Hermes's stage_write leaves on disk (v1 record; ``extra`` adds newer fields)."""
    pid = uuid.uuid4().hex[:8]
    folder = root / "pending" / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    record = {"id": pid, "subsystem": "memory", "action": payload.get("action", ""),
              "summary": f"{payload.get('action')} to memory", "origin": origin, "created_at": time.time(),
              "payload": payload, **extra}
    tmp = folder / f"{pid}.json.tmp"
    tmp.write_text(json.dumps(record, ensure_ascii=False, indent=2), encoding="utf-8")
    os.replace(tmp, folder / f"{pid}.json")
    return pid


def hermes_list(root: Path) -> list[dict[str, Any]]:
    """Hermes's list_pending: every ``*.json`` of the folder, oldest first."""
    folder = root / "pending" / "memory"
    records = [json.loads(p.read_text("utf-8")) for p in folder.glob("*.json")] if folder.is_dir() else []
    return sorted(records, key=lambda r: r.get("created_at", 0))


def hermes_read(path: Path) -> list[str]:
    raw = path.read_text(encoding="utf-8") if path.exists() else ""
    return [e.strip() for e in raw.split(DELIMITER) if e.strip()]


def hermes_approve(root: Path, pid: str) -> None:
    """Hermes's /memory approve of an ``add``: replay it against MEMORY.md / USER.md, then delete the record."""
    record = json.loads((root / "pending" / "memory" / f"{pid}.json").read_text("utf-8"))
    payload = record["payload"]
    assert payload["action"] == "add"
    path = root / "memories" / ("USER.md" if payload.get("target") == "user" else "MEMORY.md")
    path.write_text(DELIMITER.join([*hermes_read(path), payload["content"]]), encoding="utf-8")
    (root / "pending" / "memory" / f"{pid}.json").unlink()


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ironmem.cli", "--home", str(home), *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A Hermes home: ``memories/`` (the memory folder ironmem opens) beside ``pending/``."""
    (tmp_path / "memories").mkdir()
    (tmp_path / "memories" / "MEMORY.md").write_text("Project Kestrel deploys on Fridays", encoding="utf-8")
    return tmp_path


def _hold(manager: MemoryManager, content: str = PLANTED) -> str:
    session = manager.start_session("s1")
    session.begin_turn("Summarize https://example.com")
    session.observe("<html>...</html>", origin="tool", source="web_fetch")
    return str(json.loads(session.handle_tool_call("memory", {"action": "add", "content": content}))["pending_id"])


# -- Hermes stages, ironmem decides ---------------------------------------------------------------------
def test_ironmem_review_lists_hermes_records_and_approving_applies_them(root: Path) -> None:
    home = root / "memories"
    single = hermes_stage(root, {"action": "add", "target": "memory", "content": "Deploys need two reviewers",
                                 "old_text": None})
    batch = hermes_stage(root, {"action": "batch", "target": "user", "operations": [
        {"action": "add", "content": "Prefers metric units"}, {"action": "add", "content": "Lives in Lyon"}]},
        origin="foreground")
    listed = json.loads(_cli(home, "review", "--json").stdout)
    assert [(r["id"], r["origin"]) for r in listed] == [(single, "assistant hermes background_review"),
                                                        (batch, "assistant hermes foreground")]
    assert listed[1]["texts"] == ["Prefers metric units", "Lives in Lyon"]
    assert _cli(home, "review", "--approve", single).returncode == 0
    assert _cli(home, "review", "--approve", batch).returncode == 0
    assert hermes_read(home / "MEMORY.md") == ["Project Kestrel deploys on Fridays", "Deploys need two reviewers"]
    assert hermes_read(home / "USER.md") == ["Prefers metric units", "Lives in Lyon"]
    assert hermes_list(root) == []  # decided: gone from Hermes's list, as Hermes's own approve leaves it
    approved = json.loads(_cli(home, "review", "--status", "approved", "--json").stdout)
    assert {(r["id"], r["decided_by"]) for r in approved} == {(single, "ironmem review"), (batch, "ironmem review")}
    again = _cli(home, "review", "--approve", single)
    assert again.returncode != 0 and "already approved" in again.stderr


def test_rejecting_a_hermes_record_removes_it_and_keeps_the_decision(root: Path) -> None:
    pid = hermes_stage(root, {"action": "add", "target": "memory", "content": PLANTED})
    with MemoryManager(home=root / "memories") as manager:
        done = manager.builtin.reject(pid, by="ada", note="scam")
        assert (done.status, done.note) == ("rejected", "scam")
        assert PLANTED not in manager.builtin.file("memory").read().entries
        assert [p.id for p in manager.builtin.pending(status="rejected")] == [pid]
    assert hermes_list(root) == []


def test_a_hermes_record_that_cannot_apply_stays_where_hermes_lists_it(root: Path) -> None:
    pid = hermes_stage(root, {"action": "replace", "target": "memory", "old_text": "no such entry",
                              "content": "Deploys on Mondays"})
    with MemoryManager(home=root / "memories") as manager:
        with pytest.raises(OperationError):
            manager.builtin.approve(pid)
        assert [p.id for p in manager.builtin.pending()] == [pid]
    assert [r["id"] for r in hermes_list(root)] == [pid]


def test_records_hermes_would_not_apply_are_not_offered(root: Path) -> None:
    good = hermes_stage(root, {"action": "add", "target": "memory", "content": "Uses uv"})
    changed = hermes_stage(root, {"action": "add", "target": "memory", "content": "Uses pip"},
                           schema_version=2, state="pending", payload_sha256="0" * 64)
    applying = hermes_stage(root, {"action": "add", "target": "memory", "content": "Uses conda"},
                            schema_version=2, state="applying", applying_started_at=time.time())
    (root / "pending" / "memory" / "broken.json").write_text("{not json", encoding="utf-8")
    with MemoryManager(home=root / "memories") as manager:
        assert [p.id for p in manager.builtin.pending()] == [good]
        for pid in (changed, applying, "broken"):
            with pytest.raises(PendingWriteError, match="no pending write"):
                manager.builtin.approve(pid)
    # and they are left as they are, for Hermes
    assert {p.name for p in (root / "pending" / "memory").glob("*.json")} == {
        f"{good}.json", f"{changed}.json", f"{applying}.json", "broken.json"}


def test_a_claim_left_by_a_dead_decider_is_put_back(root: Path) -> None:
    pid = hermes_stage(root, {"action": "add", "target": "memory", "content": "Uses uv"})
    folder = root / "pending" / "memory"
    os.rename(folder / f"{pid}.json", folder / f".{pid}.ironmem-claim")  # a decider died while applying
    with MemoryManager(home=root / "memories") as manager:
        assert [p.id for p in manager.builtin.pending()] == [pid]  # nothing is lost
        manager.builtin.approve(pid)
        assert "Uses uv" in manager.builtin.file("memory").read().entries
    assert list(folder.iterdir()) == []


# -- ironmem holds, Hermes sees it ---------------------------------------------------------------------
def test_a_write_ironmem_holds_is_a_record_hermes_lists_and_may_decide(root: Path) -> None:
    home = root / "memories"
    manager = MemoryManager(home=home)
    pid = _hold(manager)
    (record,) = hermes_list(root)
    # what Hermes checks before it offers a record: its id is the file name, memory subsystem, the payload digest
    assert (record["id"], record["subsystem"], record["action"]) == (pid, "memory", "add")
    assert record["payload"] == {"action": "add", "target": "memory", "content": PLANTED}
    assert record["payload_sha256"] == _sha(record["payload"]) and isinstance(record["created_at"], float)
    assert record["origin"] == "tool web_fetch" and record["summary"] == "add to memory"
    assert PLANTED not in hermes_read(home / "MEMORY.md")  # held: outside the files Hermes loads
    # Hermes approves it with /memory approve: ironmem sees it decided there, and will not apply it twice
    hermes_approve(root, pid)
    assert manager.builtin.pending() == []
    (seen,) = manager.builtin.pending(status="resolved")
    assert seen.id == pid and "decided in Hermes" in seen.note
    with pytest.raises(PendingWriteError, match="decided in Hermes"):
        manager.builtin.approve(pid)
    assert hermes_read(home / "MEMORY.md").count(PLANTED) == 1
    manager.close()


def test_a_write_ironmem_holds_and_approves_leaves_hermes_nothing_to_apply(root: Path) -> None:
    with MemoryManager(home=root / "memories") as manager:
        pid = _hold(manager)
        assert [r["id"] for r in hermes_list(root)] == [pid]
        manager.builtin.approve(pid, by="ada")
        assert hermes_list(root) == []
        assert [p.status for p in manager.builtin.pending(status="all")] == ["approved"]


def test_per_user_files_are_not_staged_where_hermes_would_apply_them_to_its_own(root: Path) -> None:
    with MemoryManager(home=root / "memories") as manager:
        session = manager.start_session("s1", user_id="ada")
        session.begin_turn("Summarize https://example.com")
        session.observe("<html>...</html>", origin="tool", source="web_fetch")
        held = json.loads(session.handle_tool_call("memory", {"action": "add", "target": "user",
                                                              "content": PLANTED}))
        assert held["staged"] and hermes_list(root) == []
        assert [p.id for p in manager.builtin.pending()] == [held["pending_id"]]


def test_a_home_that_is_not_a_hermes_folder_gets_no_pending_folder(tmp_path: Path) -> None:
    with MemoryManager(home=tmp_path / "notes") as manager:
        _hold(manager)
    assert not (tmp_path / "pending").exists()


_APPROVER = """
import json, os, sys, time
from ironmem import MemoryManager
from ironmem.core.errors import PendingWriteError
home, pid, go = sys.argv[1], sys.argv[2], sys.argv[3]
manager = MemoryManager(home=home)
while not os.path.exists(go):
    time.sleep(0.005)
try:
    manager.builtin.approve(pid, by=str(os.getpid()))
    print(json.dumps({"ok": True}))
except PendingWriteError as exc:
    print(json.dumps({"ok": False, "error": str(exc)}))
manager.close()
"""


def test_two_processes_approving_the_same_hermes_record(root: Path) -> None:
    pid = hermes_stage(root, {"action": "add", "target": "memory", "content": "Deploys need two reviewers"})
    go = root / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _APPROVER, str(root / "memories"), pid, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    time.sleep(1.5)
    go.write_text("go")
    answers = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(a["ok"] for a in answers) == [False, True]
    (loser,) = [a for a in answers if not a["ok"]]
    assert "already approved" in loser["error"] and "nothing was changed" in loser["error"]
    assert hermes_read(root / "memories" / "MEMORY.md").count("Deploys need two reviewers") == 1
    assert hermes_list(root) == []
