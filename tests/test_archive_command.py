"""``ironmem archive list|show|restore`` (issue 37), as a user runs it: ``python -m ironmem.cli``."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import run

from ironmem import MemoryManager


def _full_home(home: Path) -> str:
    """A home whose MEMORY.md filled up once: one entry moved to the archive, one replaced. Returns the moved text."""
    with MemoryManager(home=home, memory_char_limit=100) as manager:
        first = manager.start_session("s1")
        for fact in ("The deploy target is Ubuntu 22.04", "Staging runs Postgres 15", "CI uses two workers"):
            assert json.loads(first.handle_tool_call("memory", {"action": "add", "target": "memory", "content": fact}))["success"]
        first.end()
        second = manager.start_session("s2")
        result = json.loads(second.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "Releases go out on Thursdays"}))
        assert json.loads(second.handle_tool_call(
            "memory", {"action": "replace", "target": "memory", "old_text": "two workers",
                       "content": "CI uses four workers"}))["success"]
        return str(result["archived"][0]["entry"])


def test_list_show_and_restore_what_left_a_full_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    moved = _full_home(home)
    listed = run("archive", "list", "--json", home=home)
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["entries"]
    assert row["text"] == moved and row["status"] == "archived" and "full" in row["why"]
    both = json.loads(run("archive", "list", "--superseded", "--json", home=home).stdout)["entries"]
    assert {r["status"] for r in both} == {"archived", "superseded (replace)"}
    assert "replaced by: CI uses four workers" in [r["why"] for r in both if r["status"].startswith("superseded")]
    shown = run("archive", "show", row["id"], home=home)
    assert shown.returncode == 0 and moved in shown.stdout and "why: " in shown.stdout
    table = run("archive", "list", home=home)
    assert row["id"] in table.stdout and "MEMORY.md" in table.stdout
    restored = run("archive", "restore", row["id"], "--json", home=home)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["restored"] == moved
    assert moved in (home / "MEMORY.md").read_text(encoding="utf-8")
    after = json.loads(run("archive", "list", "--json", home=home).stdout)["entries"]
    assert moved not in [r["text"] for r in after]


def test_unknown_ids_and_targets_say_what_to_do(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _full_home(home)
    missing = run("archive", "restore", "0123456789ab", home=home)
    assert missing.returncode == 2 and "ironmem archive list" in missing.stderr
    assert run("archive", "show", "nope", home=home).returncode == 2
    bad = run("archive", "list", "--target", "notes", home=home)
    assert bad.returncode == 2 and "use memory or user" in bad.stderr
    empty = tmp_path / "empty"
    MemoryManager(home=empty).close()
    assert "the archive is empty" in run("archive", "list", home=empty).stdout
