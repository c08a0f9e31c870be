"""A memory home this user cannot write can be inspected, and nothing in it changes (issue 15).

The CLI's read commands open the home with ``MemoryManager(read_only=True)``. The end-to-end tests make the home
really read-only for the ``ironmem`` process: ``chmod -R a-w``, and, for root (which ignores modes), the process
runs without the capabilities that let root write anyway (``setpriv --bounding-set -dac_override,...``); a
second variant mounts the home read-only (a bind mount in a private mount namespace: ``EROFS`` for everyone).
Each test first proves the folder is read-only for that process, or skips saying why it cannot be made so.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import REPO, assert_one_line_error, write_entries

from ironmem import MemoryManager
from ironmem.core.errors import ReadOnlyError
from ironmem.core.home import find_home

NO_WRITE_CAPS = "-dac_override,-dac_read_search,-fowner,-linux_immutable"
# The bind mount is made in a private mount namespace, so it never shows outside this one process tree.
BIND_RO = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'


def tree(folder: Path) -> dict[str, tuple[bytes | None, int, int]]:
    """Every path under ``folder`` with its content (files), mode and modification time."""
    out: dict[str, tuple[bytes | None, int, int]] = {}
    for path in sorted([folder, *folder.rglob("*")]):
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        out[str(path.relative_to(folder))] = (content, info.st_mode, info.st_mtime_ns)
    return out


def make_home(home: Path) -> Path:
    """A home that an agent used: shared agent notes (opted in), a user's own profile, synced turns (a search
    index on disk)."""
    with MemoryManager(home=home, memory_per_user=False) as manager:
        session = manager.start_session("s1", user_id="ada")
        for args in (
            {"action": "add", "target": "memory", "content": "tidepool deploys on Fly.io"},
            {"action": "add", "target": "user", "content": "Ada prefers short answers"},
        ):
            assert json.loads(session.handle_tool_call("memory", args))["success"]
        session.sync_turn("which region do we deploy to?", "Frankfurt, on the Fly.io fra region")
        session.end()
    write_entries(home / "USER.md", ["Name: Ada (shared profile)"])
    assert (home / ".ironmem" / "search.db").is_file()
    return home


def set_writable(folder: Path, writable: bool) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _prefix(how: str, home: Path) -> list[str]:
    """The argv prefix that runs a process for which ``home`` is read-only (pytest.skip when impossible)."""
    if how == "chmod":
        if os.geteuid() != 0:
            return []
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, and setpriv (util-linux) is missing to drop root's write override")
        return [setpriv, f"--bounding-set={NO_WRITE_CAPS}"]
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("a read-only bind mount needs root and unshare (util-linux)")
    return [unshare, "--mount", "sh", "-c", BIND_RO, str(home)]


@pytest.fixture(params=["chmod", "bind"])
def readonly(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """(home, argv prefix): a used home, and how to run a process for which it is read-only."""
    home = make_home(tmp_path / "home")
    how = str(request.param)
    prefix = _prefix(how, home)
    if how == "chmod":
        set_writable(home, False)
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1], 'probe').write_text('x')",
         str(home)], capture_output=True, text=True, timeout=60, check=False,
    )
    if probe.returncode == 0 or not any(e in probe.stderr for e in ("Permission denied", "Read-only file system")):
        set_writable(home, True)
        pytest.skip(f"could not make {home} read-only for a child process ({how}): {probe.stderr.strip()[-200:]}")
    try:
        yield home, prefix
    finally:
        set_writable(home, True)


def run_in(prefix: list[str], *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONMEM_")}
    env.update(PYTHONIOENCODING="utf-8", COLUMNS="200", PYTHONPATH=str(REPO))
    return subprocess.run(
        [*prefix, sys.executable, "-m", "ironmem.cli", "--home", str(home), *args],
        capture_output=True, text=True, encoding="utf-8", env=env, cwd=REPO, timeout=180, check=False,
    )


def test_read_commands_work_on_a_read_only_home_and_write_nothing(readonly: tuple[Path, list[str]]) -> None:
    home, prefix = readonly
    before = tree(home)

    status = run_in(prefix, "status", "--json", home=home)
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["files"]["memory"]["entries"] == 1 and info["turns_indexed"] == 1
    assert info["users"] == ["ada"]
    ada = json.loads(run_in(prefix, "status", "--json", "--user", "ada", home=home).stdout)
    assert ada["files"]["user"]["entries"] == 1 and ada["snapshot_hash"] != info["snapshot_hash"]

    shown = json.loads(run_in(prefix, "show", "--json", home=home).stdout)
    assert [e["text"] for e in shown["memory"]["entries"]] == ["tidepool deploys on Fly.io"]
    assert [e["text"] for e in shown["user"]["entries"]] == ["Name: Ada (shared profile)"]
    own = json.loads(run_in(prefix, "show", "--json", "--user", "ada", "--target", "user", home=home).stdout)
    assert [e["text"] for e in own["user"]["entries"]] == ["Ada prefers short answers"]

    found = json.loads(run_in(prefix, "search", "Fly.io", "--json", "--user", "ada", home=home).stdout)["results"]
    assert {hit["kind"] for hit in found} == {"turn"}  # ada's old turn (her own MEMORY.md is empty)
    found = json.loads(run_in(prefix, "search", "Fly.io", "--json", home=home).stdout)["results"]
    assert {hit["kind"] for hit in found} == {"memory"}  # the shared note (indexed in memory)

    scanned = run_in(prefix, "scan", str(home), "--json", home=home)
    assert scanned.returncode == 0, scanned.stderr
    assert json.loads(scanned.stdout)["scanned"] == 2

    for args in (("status",), ("show",), ("search", "Frankfurt"), ("tokens", "--json")):
        proc = run_in(prefix, *args, home=home)
        assert proc.returncode == 0, (args, proc.stderr)
    assert "Frankfurt" in run_in(prefix, "search", "Frankfurt", home=home).stdout

    assert tree(home) == before  # no lock file, no .known record, no index write, no backup, no -wal/-shm


def test_a_write_command_on_a_read_only_home_says_what_to_do(readonly: tuple[Path, list[str]]) -> None:
    home, prefix = readonly
    before = tree(home)
    proc = run_in(prefix, "remove", "memory", "1", "--yes", home=home)
    assert_one_line_error(proc, "read-only for this user", "`ironmem remove`", "nothing was changed", "status, show")
    assert proc.returncode == 2
    demo = run_in(prefix, "demo", "--json", home=home)
    assert_one_line_error(demo, "read-only for this user", "`ironmem demo`")
    assert tree(home) == before


# -- the core's read-only mode, in this process ---------------------------------------------------------
def test_read_only_manager_reads_everything_and_refuses_every_write(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home")
    (home / "MEMORY.md").write_text("a note\n§\nanother note", encoding="utf-8")  # a hand edit since
    before = tree(home)
    with MemoryManager(home=home, read_only=True, memory_per_user=False) as manager:
        status = manager.status()
        assert status["files"]["memory"]["entries"] == 2 and status["turns_indexed"] == 1
        session = manager.start_session("inspect", user_id="ada")
        assert "Ada prefers short answers" in session.system_prompt_block()
        def search(query: str) -> list[str]:
            return [h["text"] for h in json.loads(session.handle_tool_call("session_search", {"query": query}))["results"]]

        assert search("another") == ["another note"]  # the entries as the file holds them now ...
        assert search("tidepool") == []  # ... not as the index on disk last saw them
        refused = json.loads(session.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "a new fact"}))
        assert not refused["success"] and "read-only" in refused["error"]
        session.sync_turn("hello", "hi")  # logged, the built-in layer reported degraded, nothing stored
        assert manager.status()["turns_indexed"] == 1
        assert manager.health("builtin").to_dict()["state"] != "active"
        with pytest.raises(ReadOnlyError):
            manager.remove_entry("memory", 1)
        session.end()
    assert tree(home) == before


def test_read_only_manager_on_a_folder_ironmem_never_used_creates_nothing(tmp_path: Path) -> None:
    memories = tmp_path / ".hermes" / "memories"
    memories.mkdir(parents=True)
    write_entries(memories / "MEMORY.md", ["Hermes note", "Second Hermes note"])
    (memories / "USER.md").write_bytes(b"\xff\xfe not utf-8")  # unreadable: reported, not copied
    before = tree(tmp_path)
    location = find_home(tmp_path / ".hermes")  # a Hermes root finds its memories folder
    assert location.path == memories
    with MemoryManager(home=location.path, read_only=True) as manager:
        status = manager.status()
        assert status["files"]["memory"]["entries"] == 2 and status["turns_indexed"] == 0
        assert "error" in status["files"]["user"] and "backup" not in status["files"]["user"]
        hits = json.loads(manager.start_session("x").handle_tool_call("session_search", {"query": "Second"}))
        assert [h["text"] for h in hits["results"]] == ["Second Hermes note"]
    assert tree(tmp_path) == before


def test_read_only_index_sees_the_turns_of_a_writer_that_is_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with MemoryManager(home=home) as writer:  # its connection is open: search.db-wal exists
        session = writer.start_session("live")
        session.sync_turn("the staging database is called heron", "noted")
        assert (home / ".ironmem" / "search.db-wal").exists()
        with MemoryManager(home=home, read_only=True) as reader:
            hits = reader.builtin.index.search("heron", drop_stopwords=False)
            assert [h.kind for h in hits] == ["turn"]
        session.end()


def test_read_only_index_of_a_file_that_is_not_an_index_is_empty(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ironmem").mkdir(parents=True)
    sqlite3.connect(home / ".ironmem" / "search.db").execute("CREATE TABLE other (x)").connection.commit()
    before = tree(home)
    with MemoryManager(home=home, read_only=True) as manager:
        assert manager.status()["turns_indexed"] == 0
    assert tree(home) == before


def test_missing_home_names_the_hermes_folder_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ironmem.core.errors import ConfigError

    hermes = tmp_path / "agent-data"
    (hermes / "memories").mkdir(parents=True)
    write_entries(hermes / "memories" / "MEMORY.md", ["note"])
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("IRONMEM_HOME", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(hermes))
    with pytest.raises(ConfigError) as caught:
        find_home()
    assert str(tmp_path / ".ironmem") in str(caught.value) and f"--home {hermes / 'memories'}" in str(caught.value)
    monkeypatch.delenv("HERMES_HOME")
    with pytest.raises(ConfigError) as caught:
        find_home()
    assert "Hermes keeps" not in str(caught.value)  # ~/.hermes does not exist here


def test_opening_a_read_only_home_for_writing_in_python_says_where_and_what_to_do(
    readonly: tuple[Path, list[str]],
) -> None:
    """Issue 35 item 5: ``MemoryManager(home)`` on a home this user cannot write raised a raw
    ``sqlite3.OperationalError``; it raises ``ReadOnlyError`` naming the path and both ways out."""
    home, prefix = readonly
    before = tree(home)
    code = (
        "import sys\n"
        "from ironmem import MemoryManager\n"
        "from ironmem.core.errors import ReadOnlyError\n"
        "try:\n"
        "    MemoryManager(home=sys.argv[1])\n"
        "except ReadOnlyError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONMEM_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([*prefix, sys.executable, "-c", code, str(home)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=180, check=False)
    assert proc.returncode == 3, proc.stderr[-2000:]
    message = proc.stdout
    assert str(home) in message and "read_only=True" in message and "writable" in message
    assert "sqlite3" not in proc.stderr
    assert tree(home) == before
