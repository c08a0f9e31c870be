"""``ironmem archive``: what left a full memory file, when and why, and how to put it back.

    $ ironmem archive list                 # archived entries of MEMORY.md and USER.md (id, date, why)
    $ ironmem archive list --superseded    # also the replaced and merged versions, with their validity
    $ ironmem archive show 3f2a9c01d4e5    # one record in full
    $ ironmem archive restore 3f2a9c01d4e5 # move it back into its file (as an add: limits and merge apply)

The archive format is documented in :mod:`ironmem.core.builtin.archive`. This module only parses options, calls
the public API and renders.
"""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from .common import CLIError
from .common import console as _console
from .common import echo_json as _echo_json
from .common import manager as _manager
from .common import opts as _opts
from .common import visible as _visible

__all__ = ["register"]

_TARGETS = {"memory": "MEMORY.md", "user": "USER.md"}


def _day(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) if ts is not None else "-"


def _rows(manager: Any, user: str | None, target: str | None, superseded: bool) -> list[dict[str, Any]]:
    scopes = manager.scopes_for(user)
    out: list[dict[str, Any]] = []
    for name in ([target] if target else list(_TARGETS)):
        builtin = manager.builtin
        live = builtin.file(name, scopes[name]).read().entries
        state = builtin.archive_state(name, scopes[name])
        for record in state.archived_now(live):
            out.append({"id": record.id, "target": name, "status": "archived", "text": record.text,
                        "moved": _day(record.at), "written": _day(record.since), "recalls": record.recalls or 0,
                        "why": record.reason or ""})
        if superseded:
            for record in state.superseded_now(live):
                out.append({"id": record.id, "target": name, "status": f"superseded ({record.how or 'replace'})",
                            "text": record.text, "moved": _day(record.at), "written": _day(record.since),
                            "recalls": state.info[record.text].recalls if record.text in state.info else 0,
                            "why": f"replaced by: {record.by or ''}"})
    return out


def register(app: typer.Typer) -> None:
    """Add the ``archive`` command group (list, show, restore) to the ``ironmem`` app."""
    group = typer.Typer(help="Entries that left a full memory file (archived) or were replaced (superseded): "
                             "list, show, restore.", no_args_is_help=True)
    app.add_typer(group, name="archive")

    def check_target(target: str | None) -> None:
        if target is not None and target not in _TARGETS:
            raise CLIError(f"unknown target {target!r}; use memory or user")

    @group.command("list")
    def list_(
        ctx: typer.Context,
        target: str | None = typer.Option(None, "--target", "-t", help="memory or user (default: both)."),
        user: str | None = typer.Option(None, "--user", "-u", help="This user id's files."),
        superseded: bool = typer.Option(False, "--superseded", "-s", help="Also replaced and merged versions."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List archived entries: id, file, when they moved, when they were written, recalls, why."""
        check_target(target)
        with _manager(_opts(ctx)) as manager:
            rows = _rows(manager, user, target, superseded)
        if as_json:
            _echo_json({"entries": rows})
            return
        if not rows:
            _console().print(Text("the archive is empty: no entry has left a full file"))
            return
        table = Table("id", "file", "status", "moved", "written", "recalls", "entry")
        for row in rows:
            table.add_row(row["id"], _TARGETS[row["target"]], row["status"], row["moved"], row["written"],
                          str(row["recalls"]), Text(_visible(row["text"], 70)))
        _console().print(table)

    @group.command()
    def show(
        ctx: typer.Context,
        ref: str = typer.Argument(..., help="A record id from `ironmem archive list`."),
        user: str | None = typer.Option(None, "--user", "-u", help="This user id's files."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    ) -> None:
        """Show one archived or superseded entry in full, with what moved it, when and why."""
        with _manager(_opts(ctx)) as manager:
            found = [r for r in _rows(manager, user, None, True) if r["id"] == ref]
        if not found:
            raise CLIError(f"no archived or superseded entry has the id {ref!r}; list them with "
                           "`ironmem archive list --superseded`")
        row = found[0]
        if as_json:
            _echo_json(row)
            return
        console = _console()
        for key in ("id", "target", "status", "written", "moved", "recalls", "why"):
            console.print(Text(f"{key}: {row[key]}"))
        console.print(Text(row["text"]))

    @group.command()
    def restore(
        ctx: typer.Context,
        ref: str = typer.Argument(..., help="The id of an archived entry (`ironmem archive list`)."),
        user: str | None = typer.Option(None, "--user", "-u", help="This user id's files."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    ) -> None:
        """Move an archived entry back into its file. It is an add: the limit and merge-first apply, so
        restoring into a full file moves its least recalled, oldest entries to the archive."""
        from ..core.errors import IronMemError

        opts = _opts(ctx)
        with _manager(opts, read_only=False) as manager:
            found = [r for r in _rows(manager, user, None, False) if r["id"] == ref]
            if not found:
                raise CLIError(f"no archived entry has the id {ref!r}; list them with `ironmem archive list`")
            target = found[0]["target"]
            scope = manager.scopes_for(user)[target]
            try:
                state = manager.builtin.restore(target, ref, scope=scope)
            except IronMemError as exc:
                raise CLIError(f"could not restore {ref}: {exc}") from exc
            usage = manager.builtin.usage(target, scope)
        if as_json:
            _echo_json({"restored": found[0]["text"], "target": target, "entries": len(state.entries),
                        "usage": usage})
            return
        _console().print(Text(f"restored into {_TARGETS[target]} ({usage}): {_visible(found[0]['text'], 80)}"))
