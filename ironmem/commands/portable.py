"""``ironmem export`` and ``ironmem import`` (the format: :mod:`ironmem.core.portable`, docs/export.md)."""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from .common import HOME_OPTION, CLIError, console, echo_json, manager, opts, visible

__all__ = ["register"]

SOURCES = ("auto", "ironmem", "hermes", "langgraph-sqlite")


def _records(source: str, kind: str, user: str | None) -> Iterator[dict[str, Any]]:
    from ..core.portable import hermes_records, read_records

    path = Path(source).expanduser()
    if kind == "auto":
        if source == "-":
            kind = "ironmem"
        elif path.is_dir():
            kind = "hermes"
        elif path.is_file() and path.read_bytes()[:16] == b"SQLite format 3\x00":
            kind = "langgraph-sqlite"
        else:
            kind = "ironmem"
    if kind == "hermes":
        return hermes_records(path, user_id=user)
    if user is not None:
        raise CLIError("--user applies to a Hermes folder (its files have no user); an export names its users")
    if kind == "langgraph-sqlite":
        try:
            from langgraph.store.sqlite import SqliteStore
        except ImportError:
            raise CLIError("reading a LangGraph SQLite store needs langgraph-checkpoint-sqlite: "
                           "pip install 'ironmem[langchain]' langgraph-checkpoint-sqlite") from None
        from ..adapters.langchain.store import store_records

        if not path.is_file():
            raise CLIError(f"{source}: no such file")
        with SqliteStore.from_conn_string(str(path)) as store:
            return iter(list(store_records(store)))
    if source == "-":
        return read_records(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8"), name="<stdin>")
    if not path.is_file():
        raise CLIError(f"{source}: no such file; pass an `ironmem export` file, a Hermes memory folder or a "
                       "LangGraph SQLite store")
    handle = open(path, encoding="utf-8")

    def lines() -> Iterator[dict[str, Any]]:
        with handle:
            yield from read_records(handle, name=str(path))

    return lines()


def register(app: typer.Typer) -> None:
    """Add ``ironmem export`` and ``ironmem import``."""

    @app.command("export")
    def export_(
        ctx: typer.Context,
        home: str | None = HOME_OPTION,
        output: str = typer.Argument("-", help="File to write (default: - for stdout)."),
        force: bool = typer.Option(False, "--force", help="Replace an existing file."),
    ) -> None:
        """Everything the memory home holds (entries of every user with their archive history and provenance,
        turns, held writes, settings, store items) as one versioned JSONL file; `ironmem import` reads it back."""
        from ..core.fileio import write_atomic
        from ..core.portable import export_memory

        options = opts(ctx, home)
        buffer = io.StringIO()
        with manager(options) as memory:
            counts = export_memory(memory, buffer)
        if output == "-":
            sys.stdout.write(buffer.getvalue())
            sys.stdout.flush()
            return
        path = Path(output).expanduser()
        if path.exists() and not force:
            raise CLIError(f"{path} exists; pass --force to replace it, or another file name")
        try:
            write_atomic(path, buffer.getvalue().encode("utf-8"), mode=0o600)  # it holds the user's memory
        except OSError as exc:
            raise CLIError(f"cannot write {path}: {exc.strerror or exc}") from None
        summary = ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.items()) if kind != "header")
        console(stderr=True).print(Text(f"exported to {path}: {summary or 'nothing'}"))

    @app.command("import")
    def import_(
        ctx: typer.Context,
        home: str | None = HOME_OPTION,
        source: str = typer.Argument(..., help="An `ironmem export` file (- for stdin), a Hermes memory folder, "
                                     "or a LangGraph SQLite store."),
        kind: str = typer.Option("auto", "--from", help="auto, ironmem, hermes or langgraph-sqlite."),
        user: str | None = typer.Option(None, "--user", "-u", help="Import a Hermes folder as this user's files."),
        settings: str = typer.Option(
            "auto", "--settings",
            help="The export's settings: auto writes them to a config.yaml that does not exist yet and leaves an "
                 "existing one (showing the difference); apply also updates an existing one (keeping a copy); "
                 "keep never writes."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing; show what would be added."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Add the entries (with their archive history and provenance), turns, held writes and store items of
        SOURCE that the home does not hold yet; apply its settings to a new config.yaml. --dry-run shows the
        difference."""
        from ..core.home import default_home
        from ..core.portable import import_records, plan_settings

        if kind not in SOURCES:
            raise CLIError(f"unknown --from {kind!r}; use {', '.join(SOURCES)}")
        options = opts(ctx, home)
        records = list(_records(source, kind, user))  # every line is read and checked before anything is written
        root = Path(options.home).expanduser() if options.home else default_home()
        config = Path(options.config).expanduser() if options.config else root / "config.yaml"
        plan = plan_settings(records, config, mode=settings)
        backup = None
        if not dry_run:
            _create_home(options.home)
            try:
                backup = plan.apply(home=root, source=source)
            except OSError as exc:
                raise CLIError(f"cannot write {config}: {exc.strerror or exc}; nothing was imported") from None
            if plan.action in ("write", "update"):  # the import runs with the settings it applied
                options = replace(options, config=str(config))
        with contextlib.ExitStack() as stack:
            if dry_run and not options.config and not root.exists():  # a new home: everything would be added
                options = replace(options, home=stack.enter_context(tempfile.TemporaryDirectory()))
            memory = stack.enter_context(manager(options, read_only=dry_run))
            result = import_records(memory, records, dry_run=dry_run)
        if as_json:
            echo_json({**result.to_dict(), "settings": {
                "config": str(config), "action": plan.action, "dry_run": dry_run, "backup": str(backup) if backup
                else None, "differ": {k: {"source": a, "config": b} for k, (a, b) in plan.differ.items()}}})
        else:
            _print(result)
            _print_settings(plan, dry_run, backup)
        if result.refused:
            raise CLIError(f"{len(result.refused)} record(s) were not imported (listed above); the rest was"
                           + (" checked" if dry_run else " imported"), code=1)


def _print_settings(plan: Any, dry_run: bool, backup: Path | None) -> None:
    out = console()
    if plan.action == "none":
        return
    verb = {"write": "would write" if dry_run else "wrote", "update": "would update" if dry_run else "updated",
            "keep": "left"}[plan.action]
    out.print(Text(f"settings: {verb} {plan.path}" + (" with the source's settings" if plan.action == "write"
                                                       else "") + (f"; the previous file is at {backup}" if backup
                                                                   else "")))
    for key, (theirs, ours) in plan.differ.items():
        if plan.action in ("write", "update"):
            out.print(Text(f"  {key}: {ours!r} -> {theirs!r}"))
        else:
            out.print(Text(f"  {key}: {theirs!r} in the source, {ours!r} in the config (kept; --settings apply "
                           "takes the source's)"))


def _create_home(home: str | None) -> None:
    """An import may create its home (an empty folder, owner-only), like `ironmem setup`."""
    from ..core.home import default_home

    path = Path(home).expanduser() if home else default_home()
    if not path.exists():
        try:
            path.mkdir(mode=0o700, parents=True)
        except OSError as exc:
            raise CLIError(f"cannot create memory home {path}: {exc.strerror or exc}") from None


def _print(result: Any) -> None:
    out = console()
    verb = "would add" if result.dry_run else "added"
    out.print(Text(f"entries: {verb} {result.added:,}, already present {result.present:,}"))
    for line in result.new_entries[:50]:
        out.print(Text(f"  + {visible(line, 160)}"))
    if len(result.new_entries) > 50:
        out.print(Text(f"  ... and {len(result.new_entries) - 50:,} more (--json lists all)"))
    if result.held:
        out.print(Text(f"entries held for approval: {result.held:,} (`ironmem review` lists them)"))
    if result.history_added or result.history_present:
        out.print(Text(f"archive records: {verb} {result.history_added:,}, already present "
                       f"{result.history_present:,}"))
    out.print(Text(f"turns: {verb} {result.turns_added:,}, already present {result.turns_present:,}"))
    if result.pending_added or result.pending_present:
        out.print(Text(f"held writes: {verb} {result.pending_added:,}, already present {result.pending_present:,}"))
    if result.items_added or result.items_present:
        out.print(Text(f"store items: {verb} {result.items_added:,}, already present {result.items_present:,}"))
    for note in result.notes:
        out.print(Text(f"note: {note}"))
    for kind, n in result.unclaimed.items():
        where = f" kept in {result.unclaimed_path}" if result.unclaimed_path else " would be kept aside"
        out.print(Text(f"{n:,} record(s) of kind {kind!r} this ironmem cannot import:{where}"))
    for line in result.refused:
        out.print(Text(f"  not imported: {visible(line, 200)}", style="bold red"))
