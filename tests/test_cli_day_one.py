"""Issue 35 item 6: what a new user hit in the ``ironmem`` command, each case on the real command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ironmem import MemoryManager

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("IRONMEM_HOME", "IRONMEM_DEBUG")}
    full.update({"PYTHONIOENCODING": "utf-8", "COLUMNS": "200", **(env or {})})
    return subprocess.run([sys.executable, "-m", "ironmem.cli", *args], capture_output=True, text=True,
                          encoding="utf-8", env=full, cwd=REPO, timeout=120, check=False)


def test_the_missing_home_hint_suggests_a_command_that_creates_an_empty_home(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    proc = run("--home", str(home), "status")
    assert proc.returncode == 2
    hint = proc.stderr
    assert "demo" not in hint  # the demo fills a home with its fake facts
    suggested = re.search(r"`(ironmem setup --home [^`]+)`", hint)
    assert suggested, hint
    args = suggested.group(1).split()[1:]
    made = run(*args, "--yes")  # what the hint says, as written (plus --yes: no terminal here)
    assert made.returncode == 0, made.stderr
    status = run("--home", str(home), "status", "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert all(f["entries"] == 0 for f in info["files"].values())  # empty: no fake facts


#: Runs the real demo through ``main()``; its console waits at its third line, as a slow model call would, so the
#: interrupt lands in the middle of the demo every time.
_SLOW_DEMO = """
import sys, time
from rich.console import Console
import ironmem.cli as cli

class Slow(Console):
    lines = 0
    def print(self, *args, **kwargs):
        super().print(*args, **kwargs)
        Slow.lines += 1
        if Slow.lines == 3:
            sys.__stdout__.write("waiting\\n"); sys.__stdout__.flush()
            time.sleep(60)

cli._console = lambda: Slow(width=200)
cli.main(["demo", "--framework", "plain"])
"""


def test_ctrl_c_during_the_demo_says_so_and_exits_130(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("IRONMEM_HOME",)}
    env.update({"PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"})
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_DEMO], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while (line := proc.stdout.readline()) and line.strip() != "waiting":
        pass
    assert line, proc.communicate()[1]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "ironmem: error: interrupted" in err and "Traceback" not in err


def test_show_prints_the_readable_file_and_reports_the_unreadable_one(tmp_path: Path) -> None:
    (tmp_path / "MEMORY.md").write_text("note one\n§\nnote two", encoding="utf-8")
    (tmp_path / "USER.md").write_bytes(b"\xff\xfe not utf-8")
    proc = run("--home", str(tmp_path), "show")
    assert "note one" in proc.stdout and "note two" in proc.stdout
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "USER.md" in lines[0] and "not valid UTF-8" in lines[0]
    data = json.loads(run("--home", str(tmp_path), "show", "--json").stdout)
    assert [e["text"] for e in data["memory"]["entries"]] == ["note one", "note two"]
    assert "not valid UTF-8" in data["user"]["error"]


@pytest.fixture
def two_users(tmp_path: Path) -> Path:
    with MemoryManager(home=tmp_path) as manager:
        for user, text in (("ada", "Ada's tidepool deploy uses kestrel queues"),
                           ("bob", "Bob's kestrel notes are private"),
                           (None, "the shared kestrel runbook")):
            session = manager.start_session(f"s-{user}", user_id=user)
            session.sync_turn(f"Tell me about kestrel ({user})", text)
            session.end()
    return tmp_path


def test_search_is_scoped_to_one_user_and_never_leaks_another_users_turns(two_users: Path) -> None:
    def texts(*args: str) -> list[str]:
        proc = run("--home", str(two_users), "search", "kestrel", "--json", *args)
        assert proc.returncode == 0, proc.stderr
        return [h["text"] for h in json.loads(proc.stdout)["results"]]

    ada = texts("--user", "ada")
    assert any("tidepool" in t for t in ada) and not any("Bob" in t or "shared" in t for t in ada)
    default = texts()
    assert default and all("shared kestrel runbook" in t for t in default)  # only turns without a user id
    everyone = texts("--all-users")
    assert sum("kestrel" in t for t in everyone) == 3
    proc = run("--home", str(two_users), "search", "kestrel", "--user", "ada", "--all-users")
    assert proc.returncode == 2 and "exclude each other" in proc.stderr


def test_help_keeps_square_brackets() -> None:
    proc = run("demo", "--help")
    assert "ironmem[local]" in " ".join(proc.stdout.split())


def test_every_document_an_error_points_to_exists() -> None:
    """Messages name docs pages (docs/x.md) and README sections; each named one must be there."""
    import ast

    strings = []  # the string literals of the code, docstrings (and their doctest examples) left out
    for source in (REPO / "ironmem").rglob("*.py"):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        strings += [node.value for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]
    text = "\n".join(strings)
    readme_sections = re.findall(r"README's ([\w -]+?) section", text)
    headings = {h.strip().lower() for h in re.findall(r"^#+ (.+)$", (REPO / "README.md").read_text(encoding="utf-8"),
                                                     flags=re.M)}
    for section in readme_sections:
        assert any(section.lower() in h for h in headings), f"README has no {section!r} section"
    for page in set(re.findall(r"\bdocs/[\w/.-]+?\.md\b", text)):
        assert (REPO / page).is_file(), f"{page} is named in a message but does not exist"


def test_an_interrupted_writer_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C at the moment a state file (the record of written entries, a corrupt file's backup) is renamed
    into place: the temp file goes, the memory file stays as it was."""
    real_replace = os.replace

    def interrupted_at(suffix: str):
        def replace(src: str, dst: str) -> None:
            if str(dst).endswith(suffix):
                raise KeyboardInterrupt
            real_replace(src, dst)
        return replace

    with MemoryManager(home=tmp_path) as manager:
        session = manager.start_session("a")
        monkeypatch.setattr(os, "replace", interrupted_at(".known"))
        with pytest.raises(KeyboardInterrupt):
            session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "first note"})
        monkeypatch.setattr(os, "replace", real_replace)
    assert "first note" in (tmp_path / "MEMORY.md").read_text(encoding="utf-8")
    (tmp_path / "USER.md").write_bytes(b"\xff\xfe not utf-8")
    monkeypatch.setattr(os, "replace", interrupted_at(".corrupt"))
    with pytest.raises(KeyboardInterrupt), MemoryManager(home=tmp_path) as manager:
        manager.builtin.files["user"].read()
    monkeypatch.setattr(os, "replace", real_replace)
    strays = [p for p in tmp_path.rglob("*") if ".ironmem-tmp-" in p.name]
    assert strays == []
    assert (tmp_path / "USER.md").read_bytes() == b"\xff\xfe not utf-8"


def test_commands_register_through_the_commands_package() -> None:
    from typer.main import get_command

    from ironmem import cli

    names = set(get_command(cli.app).commands)  # type: ignore[attr-defined]
    assert {"search", "setup", "doctor"} <= names
    for module in cli.COMMAND_MODULES:
        assert (REPO / "ironmem" / "commands" / f"{module}.py").is_file()
