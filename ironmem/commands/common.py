"""What every ``ironmem`` command shares: global options, the manager of the home, errors, output helpers.

A command module (``ironmem/commands/<name>.py``) imports from here, never from :mod:`ironmem.cli` (which imports
the command modules).

Example:
    >>> opts = Options(home="/tmp/somewhere")
    >>> opts.home
    '/tmp/somewhere'
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from ..core.errors import IronMemError

if TYPE_CHECKING:  # pragma: no cover
    from ..core.manager import MemoryManager

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_ERROR",
    "HOME_OPTION",
    "TARGET_FILES",
    "CLIError",
    "Options",
    "console",
    "copy_note",
    "corrupt_files",
    "echo_json",
    "manager",
    "open_manager",
    "opts",
    "visible",
]

#: Exit status for bad input and failures (``scan`` uses 1 for "something is blocked").
EXIT_ERROR = 2
EXIT_BLOCKED = 1

TARGET_FILES = {"memory": "MEMORY.md", "user": "USER.md"}


class CLIError(IronMemError):
    """A user-facing failure: printed as one line on stderr, exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Options:
    """Global options, shared by every command through the click context."""

    home: str | None = None
    config: str | None = None
    verbose: bool = False
    command: str = "this command"  # for messages: "`ironmem remove`"


def console(*, stderr: bool = False) -> Console:
    """A rich console; piped output (not a terminal) gets 120 columns unless COLUMNS says otherwise."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 120
    return Console(highlight=False, soft_wrap=False, width=width, stderr=stderr)


def echo_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    sys.stdout.flush()


def visible(text: str, limit: int | None = None) -> str:
    """``text`` with invisible and format characters shown as ``\\uXXXX`` (so a reviewer sees them)."""
    out = []
    for ch in text:
        if ch in "\n\t":
            out.append(" " if ch == "\n" else ch)
        elif unicodedata.category(ch) in ("Cf", "Cc", "Co") or 0xE0000 <= ord(ch) <= 0xE007F:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    flat = "".join(out)
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat


def open_manager(options: Options, *, read_only: bool) -> MemoryManager:
    """The manager for the configured setup: from ``--config`` if given, else from the home's own
    ``config.yaml`` (where ``ironmem setup`` writes it), else the built-in layer at the home.

    With both ``--config`` and ``--home``, the home from the command line wins over the file's ``memory.home``;
    a home's own ``config.yaml`` always describes that home.
    Read commands open it ``read_only`` (nothing in the home is created or changed, so a home this user cannot
    write can be inspected); a write command on a read-only home fails with what to do.
    """
    from ..core.home import find_home
    from ..core.manager import MemoryManager

    if options.config:
        config = Path(options.config).expanduser()
        if not config.is_file():
            raise CLIError(
                f"config file {config} does not exist (from --config); pass the path of a config.yaml"
            )
        from ..core.config import load_config, manager_from_config

        loaded = load_config(config)
        # A missing home is the same error whether it comes from --home, IRONMEM_HOME or the file's memory.home.
        location = (find_home(options.home) if options.home
                    else find_home(loaded.home, origin=f"memory.home in {config}"))
        if not read_only:
            location.require_writable(options.command)
        return manager_from_config(loaded, home=location.path, read_only=read_only)
    location = find_home(options.home)
    if not read_only:
        location.require_writable(options.command)
    own = location.path / "config.yaml"
    if own.is_file():
        from ..core.config import load_config, manager_from_config

        return manager_from_config(load_config(own), home=location.path, read_only=read_only)
    return MemoryManager(home=location.path, read_only=read_only)


@contextmanager
def manager(options: Options, *, read_only: bool = True) -> Iterator[MemoryManager]:
    """:func:`open_manager`, closed on exit."""
    opened = open_manager(options, read_only=read_only)
    try:
        yield opened
    finally:
        opened.close()


def copy_note(backup: Path | None) -> str:
    return f"; a copy is at {backup}" if backup else "; it was left as it is"


def corrupt_files(opened: MemoryManager) -> list[str]:
    """One message per memory file that cannot be parsed."""
    problems = []
    for target in TARGET_FILES:
        state = opened.builtin.files[target].read()
        if state.corrupt:
            problems.append(f"{state.corrupt} ({opened.builtin.files[target].path}){copy_note(state.backup)}")
    return problems


def opts(ctx: typer.Context, home: str | None = None) -> Options:
    """The global options, with a command's own ``--home`` (``ironmem show --home X``) taking precedence."""
    obj = ctx.find_root().obj
    found = obj if isinstance(obj, Options) else Options()
    return replace(found, home=home or found.home, command=f"`{ctx.command_path}`")


HOME_OPTION = typer.Option(
    None, "--home", help="Memory home (folder with MEMORY.md and USER.md); same as the global --home."
)
