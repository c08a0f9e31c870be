"""The ``ironmem`` command: inspect a memory home, scan text, count tokens, simulate caching, run the demo.

Every command reads the memory home from ``--home``, else ``$IRONMEM_HOME``, else ``~/.ironmem``
(:func:`ironmem.core.home.find_home`). A Hermes memory folder (``~/.hermes/memories`` holding
``MEMORY.md`` and ``USER.md``) works as a home as is; pointing at ``~/.hermes`` itself finds its ``memories``
folder. ``--config PATH`` builds the manager from a ``config.yaml``; without it, the home's own ``config.yaml``
(where ``ironmem setup`` writes it) is read when there is one.

The read commands (``status``, ``show``, ``search``, ``tokens``, ``scan``) open the home read-only
(``MemoryManager(read_only=True)``): they work on a home this user cannot write and change nothing in it.
``remove`` and ``demo`` write; on a read-only home they stop with what to do. This module only parses options,
calls the public API and prints; the newer commands live in :mod:`ironmem.commands` (one module each, listed in
``COMMAND_MODULES``): ``search``, ``setup``/``doctor``, ``export``/``import``, ``mcp``.

Bad input (a missing file, an unknown provider, a corrupt memory file, a home that does not exist) ends with one
line on stderr and a non-zero exit status, never a traceback. ``scan`` exits with 1 when anything is blocked, like
a linter; errors exit with 2.

Example (a shell)::

    $ ironmem demo                    # a scripted two-session agent run, offline, in a temp home
    $ ironmem --home ~/.hermes/memories status
    $ ironmem show
    $ ironmem scan notes.txt --json
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .commands import register_all
from .commands.common import (
    EXIT_BLOCKED,
    EXIT_ERROR,
    HOME_OPTION,
    TARGET_FILES,
    CLIError,
    Options,
    copy_note,
    corrupt_files,
    echo_json,
    visible,
)
from .commands.common import console as _console
from .commands.common import manager as _manager
from .commands.common import opts as _opts
from .core.errors import IronMemError

__all__ = ["CLIError", "app", "main"]

#: ``simulate`` keeps every request's tokens (quadratic in turns with replayed history): this bounds its memory.
MAX_SIMULATED_TURNS = 300

app = typer.Typer(
    name="ironmem",
    help=(
        "Persistent agent memory that keeps the prompt cache warm. Configure it (setup, doctor), inspect a memory "
        "home (status, show, search, remove), move it (export, import), serve it to MCP clients (mcp), scan text "
        "(scan), measure tokens (tokens), simulate prompt caching (simulate), or run the offline demo (demo)."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    # Help texts are plain text: with rich markup, "ironmem[local]" or "[--all]" would lose their brackets.
    rich_markup_mode=None,
)

#: Command modules in ironmem/commands/, each exposing ``register(app)`` (one line per module; see
#: :mod:`ironmem.commands`).
COMMAND_MODULES: tuple[str, ...] = (
    "archive",
    "custody",
    "search",
    "setup",
    "portable",
    "mcp",
)


# --------------------------------------------------------------------------------------------------
# Global options
# --------------------------------------------------------------------------------------------------
def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        sys.stdout.write(f"ironmem {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    home: str | None = typer.Option(
        None,
        "--home",
        help="Memory home (folder with MEMORY.md and USER.md). Default: $IRONMEM_HOME or ~/.ironmem.",
    ),
    config: str | None = typer.Option(None, "--config", help="A config.yaml to build the manager from."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show ironmem's log warnings on stderr."),
    version: bool = typer.Option(
        False,
        "--version",
        help="Print the ironmem version and exit.",
        callback=lambda value: _print_version(value),
        is_eager=True,
    ),
) -> None:
    """Persistent agent memory that keeps the prompt cache warm."""
    ctx.obj = Options(home=home, config=config, verbose=verbose)
    logger = logging.getLogger("ironmem")
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("ironmem: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    else:
        # Problems reach the user through the command's own output; keep log lines off stderr.
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


# --------------------------------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------------------------------
@app.command()
def status(
    ctx: typer.Context,
    home: str | None = HOME_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    user: str | None = typer.Option(None, "--user", "-u", help="Show this user id's files (users/<folder>/)."),
    probe: bool = typer.Option(
        True, "--probe/--no-probe", help="Let the external provider contact its service first (one request)."
    ),
) -> None:
    """Providers (active or degraded), their configuration, usage of MEMORY.md and USER.md, the snapshot hash."""
    opts = _opts(ctx, home)
    with _manager(opts) as manager:
        if probe:
            manager.check_external()
        info = manager.status(user)
        problems = corrupt_files(manager)
    if as_json:
        echo_json(info)
    else:
        console = _console()
        console.print(Text(f"memory home: {info['home']}"))
        providers = Table(title="providers", title_justify="left")
        for column in ("provider", "kind", "state", "tools", "reason"):
            providers.add_column(column)
        for p in info["providers"]:
            state = Text(p["state"], style="green" if p["state"] == "active" else "bold red")
            providers.add_row(
                p["name"], p["kind"], state, ", ".join(p.get("tools", [])), Text(p.get("reason", ""))
            )
        console.print(providers)
        for p in info["providers"]:  # a provider's own report: configuration (secrets masked), service state
            details = {**{f"config.{k}": v for k, v in (p.get("config") or {}).items()},
                       **{f"service.{k}": v for k, v in (p.get("service") or {}).items()}}
            if not details:
                continue
            table = Table(title=f"{p['name']}", title_justify="left")
            table.add_column("setting")
            table.add_column("value")
            for key, value in details.items():
                shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
                table.add_row(key, Text(shown))
            console.print(table)
        files = Table(title="files", title_justify="left")
        for column in ("file", "entries", "usage", "path"):
            files.add_column(column)
        for target, f in info["files"].items():
            if f.get("error"):
                usage = Text(f"UNREADABLE: {f['error']}", style="bold red")
            elif f.get("over_limit"):
                usage = Text(f"{f['usage']} ({f['snapshot_note']})", style="bold red")
            else:
                usage = Text(f["usage"])
            files.add_row(TARGET_FILES[target], str(f["entries"]), usage, Text(f["path"]))
        console.print(files)
        if info.get("users"):
            console.print(Text(f"users with their own files: {len(info['users']):,} (ironmem status --user ID)"))
        console.print(Text(f"turns indexed: {info['turns_indexed']:,}"))
        recall = info.get("recall") or {}
        if recall:
            how = (f"hybrid ({recall.get('model')}, embedded up to turn {recall.get('turns_embedded_upto', 0):,})"
                   if recall.get("mode") == "hybrid" else f"lexical ({recall.get('reason', '')})")
            console.print(Text(f"recall: {how}; budget {recall.get('budget_items')} items, "
                               f"~{recall.get('budget_tokens')} tokens"))
        console.print(Text(f"snapshot hash: {info['snapshot_hash']}"))
        if "tool_budget" in info:
            console.print(Text(_budget_line(info["tool_budget"])))
    if problems:
        raise CLIError(problems[0])


# --------------------------------------------------------------------------------------------------
# show
# --------------------------------------------------------------------------------------------------
_SHOW_ENTRY_CHARS = 2000
_SHOW_MAX_ENTRIES = 200


def _targets(target: str) -> list[str]:
    if target == "all":
        return list(TARGET_FILES)
    if target not in TARGET_FILES:
        raise CLIError(f"unknown target {target!r}; use memory, user or all")
    return [target]


@app.command()
def show(
    ctx: typer.Context,
    home: str | None = HOME_OPTION,
    target: str = typer.Option("all", "--target", "-t", help="memory, user or all."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    user: str | None = typer.Option(None, "--user", "-u", help="Show this user id's files (users/<folder>/)."),
    full: bool = typer.Option(False, "--full", help="Print long entries whole (default: cut at 2,000 chars)."),
) -> None:
    """The numbered entries of MEMORY.md and USER.md, each with its security-scan verdict.

    An entry longer than 2,000 characters is cut (the file is not: ``--full`` prints it whole), and at most
    the first 200 entries are listed, so a runaway file cannot flood the terminal.
    """
    from .core.security import scan

    opts = _opts(ctx, home)
    targets = _targets(target)
    out: dict[str, Any] = {}
    problems: list[str] = []
    with _manager(opts) as manager:
        scopes = manager.scopes_for(user)
        for t in targets:
            memory_file = manager.builtin.file(t, scopes[t])
            try:
                state = memory_file.read()
                problem = (f"{state.corrupt} ({memory_file.path}){copy_note(state.backup)}"
                           if state.corrupt else "")
            except (IronMemError, OSError) as exc:  # one unreadable file does not hide the others
                problem = f"cannot read {memory_file.path}: {getattr(exc, 'strerror', None) or exc}"
            if problem:
                problems.append(f"{problem}. Fix or delete the file, then retry")
                out[t] = {"file": str(memory_file.path), "error": problem}
                continue
            rows = []
            for i, entry in enumerate(state.entries, start=1):
                if not full and i > _SHOW_MAX_ENTRIES:
                    break
                shown = entry if full or len(entry) <= _SHOW_ENTRY_CHARS else entry[:_SHOW_ENTRY_CHARS]
                verdict = scan(shown)
                row: dict[str, Any] = {
                    "n": i,
                    "text": shown,
                    "blocked": verdict.blocked,
                    "categories": verdict.categories,
                }
                if len(shown) < len(entry):
                    row["truncated"] = True
                    row["chars"] = len(entry)
                rows.append(row)
            out[t] = {
                "file": str(memory_file.path),
                "usage": manager.builtin.usage(t, scopes[t]),
                "entries": rows,
            }
            if len(rows) < len(state.entries):
                out[t]["entries_not_listed"] = len(state.entries) - len(rows)
    if as_json:
        echo_json(out)
    else:
        _print_show(out)
    if problems:  # what could be read is shown above; each unreadable file gets its line, and the status says so
        for problem in problems[:-1]:
            sys.stderr.write(f"ironmem: error: {problem}\n")
        raise CLIError(problems[-1])


def _print_show(out: dict[str, Any]) -> None:
    console = _console()
    for t, data in out.items():
        if "error" in data:
            console.print(Text(f"{TARGET_FILES[t]}  UNREADABLE  {data['file']} (see the error below)",
                               style="bold red"))
            continue
        console.print(Text(f"{TARGET_FILES[t]}  [{data['usage']}]  {data['file']}", style="bold"))
        table = Table(show_lines=True)
        table.add_column("#", justify="right")
        table.add_column("entry", overflow="fold")
        table.add_column("scan")
        for row in data["entries"]:
            text: Text
            if row["blocked"]:
                verdict_cell = Text("BLOCKED: " + ", ".join(row["categories"]), style="bold red")
                text = Text(visible(row["text"]))
            else:
                verdict_cell = Text("ok", style="green")
                text = Text(row["text"])
            if row.get("truncated"):
                text.append(f" [... cut: {row['chars']:,} chars in all; --full prints it whole]", style="bold red")
            table.add_row(str(row["n"]), text, verdict_cell)
        if not data["entries"]:
            table.add_row("", Text("(empty)", style="dim"), "")
        console.print(table)
        if data.get("entries_not_listed"):
            console.print(Text(f"... {data['entries_not_listed']:,} more entries not listed (--full lists all)",
                               style="bold red"))


# --------------------------------------------------------------------------------------------------
# remove
# --------------------------------------------------------------------------------------------------
@app.command()
def remove(
    ctx: typer.Context,
    home: str | None = HOME_OPTION,
    target: str = typer.Argument(..., help="memory or user."),
    number: int = typer.Argument(..., help="The entry's number, as `ironmem show` lists it."),
    user: str | None = typer.Option(None, "--user", "-u", help="Remove from this user id's files (as show --user)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    no_backup: bool = typer.Option(False, "--no-backup", help="Do not keep a copy of the entries before removing."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Remove one entry by its number (for example an entry the scanner blocked), after a confirmation; a copy
    of the entries as they were is kept (beside the file, FILE.<time>.bak; for a database, in the home's
    .ironmem/backups/)."""
    from .core.errors import MemoryFileError, OperationError

    opts = _opts(ctx, home)
    if target not in TARGET_FILES:
        raise CLIError(f"unknown target {target!r}; use memory or user")
    with _manager(opts, read_only=False) as manager:
        scope = manager.scopes_for(user)[target]
        entries = manager.builtin.file(target, scope).read().entries
        shown = entries[number - 1] if 1 <= number <= len(entries) else None
        if shown is not None and not yes:
            if not sys.stdin.isatty():
                raise CLIError(
                    f"about to remove entry {number} of {TARGET_FILES[target]} ({visible(shown, 60)}); "
                    "there is no terminal to confirm on: pass --yes"
                )
            if not typer.confirm(f"Remove entry {number} of {TARGET_FILES[target]}: {visible(shown, 80)}?"):
                raise CLIError("nothing removed", code=1)
        try:
            entry, backup = manager.remove_entry(target, number, user_id=user, backup=not no_backup, expected=shown)
        except (OperationError, MemoryFileError) as exc:
            raise CLIError(f"could not remove entry {number} of {TARGET_FILES[target]}: {exc}") from exc
        usage = manager.builtin.usage(target, scope)
    if as_json:
        echo_json({"removed": entry, "target": target, "number": number, "usage": usage,
                    "backup": str(backup) if backup else None})
        return
    _console().print(Text(f"removed entry {number} of {TARGET_FILES[target]} ({usage}): {visible(entry, 80)}"))
    if backup:
        _console().print(Text(f"the entries as they were are kept at {backup}"))


# --------------------------------------------------------------------------------------------------
# scan
# --------------------------------------------------------------------------------------------------
@dataclass
class _Item:
    label: str  # "MEMORY.md entry 2" / "notes.txt:14"
    source: str
    index: int
    line: int
    text: str


def _read_text(path: Path, name: str) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CLIError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise CLIError(f"{name} is a folder; pass a file, a memory home folder, or - for stdin") from None
    except OSError as exc:
        raise CLIError(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CLIError(
            f"{name} is not UTF-8 text (bad byte at offset {exc.start}); scan only text files"
        ) from None


def _split_items(text: str, source: str, by: str) -> list[_Item]:
    from .core.builtin.store import entries_with_lines

    items: list[_Item] = []
    if by == "text":
        return [_Item(source, source, 1, 1, text)] if text.strip() else []
    if by == "entry":
        return [_Item(f"{source} entry {n}", source, n, line, entry)
                for n, (line, entry) in enumerate(entries_with_lines(text), start=1)]
    for i, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            items.append(_Item(f"{source}:{i}", source, i, i, raw))
    return items


@app.command()
def scan(
    source: str = typer.Argument(..., help="A text file, a memory home folder, or - to read stdin."),
    by: str = typer.Option(
        "auto",
        "--by",
        help="Split into entries (the § format), lines, or scan the whole text. auto: entries for memory "
        "files and text holding the § separator, else lines.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    show_all: bool = typer.Option(False, "--all", help="List every item, not only the first --limit."),
    limit: int = typer.Option(200, "--limit", "-n", help="Items listed in the table (blocked ones first)."),
    max_chars: int = typer.Option(
        2000, "--max-chars", help="Characters of each item's text printed (JSON included); 0: no limit."
    ),
) -> None:
    """Security verdicts per entry or per line. Exit status 1 when anything is blocked.

    Large inputs show a progress bar on a terminal; the table lists blocked items first and at most --limit
    rows, and every text is cut at --max-chars, so a 10 MB file does not print 10 MB."""
    from .core.builtin.store import ENTRY_DELIMITER
    from .core.security import scan as scan_text

    if by not in ("auto", "entry", "line", "text"):
        raise CLIError(f"unknown --by {by!r}; use auto, entry, line or text")
    inputs: list[tuple[str, str, str]] = []  # (name, text, mode)
    if source == "-":
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CLIError(f"stdin is not UTF-8 text (bad byte at offset {exc.start})") from None
        mode = by if by != "auto" else ("entry" if ENTRY_DELIMITER in text else "line")
        inputs.append(("<stdin>", text, mode))
    else:
        path = Path(source).expanduser()
        if path.is_dir():
            from .core.home import memory_folder

            folder = memory_folder(path)  # a Hermes root reads its memories/ folder
            files = [folder / name for name in TARGET_FILES.values() if (folder / name).is_file()]
            if not files:
                raise CLIError(
                    f"{source} is a folder without MEMORY.md or USER.md; pass a file or a memory home"
                )
            for f in files:
                inputs.append((f.name, _read_text(f, str(f)), by if by != "auto" else "entry"))
        else:
            text = _read_text(path, source)
            memory_file = path.name in TARGET_FILES.values()
            mode = by if by != "auto" else ("entry" if memory_file or ENTRY_DELIMITER in text else "line")
            inputs.append((source, text, mode))

    if limit < 1 or max_chars < 0:
        raise CLIError("--limit must be at least 1 and --max-chars at least 0")
    from rich.progress import track

    items = [(item, mode) for name, text, mode in inputs for item in _split_items(text, name, mode)]
    results = []
    progress = track(items, description="scanning", console=Console(stderr=True), transient=True,
                     disable=len(items) < 500 or not sys.stderr.isatty())
    for item, mode in progress:
        results.append((item, mode, scan_text(item.text)))
    blocked = sum(1 for _, _, v in results if v.blocked)

    def clip(text: str) -> str:
        return text if not max_chars or len(text) <= max_chars else text[:max_chars] + "…"

    if as_json:
        echo_json(
            {
                "source": source,
                "items": [
                    {
                        "source": item.source,
                        "by": mode,
                        "index": item.index,
                        "line": item.line,
                        "blocked": verdict.blocked,
                        "categories": verdict.categories,
                        "findings": [
                            {
                                "category": f.category,
                                "rule": f.rule,
                                "span": list(f.span),
                                "excerpt": f.excerpt,
                            }
                            for f in verdict.findings
                        ],
                        "text": clip(item.text),
                        "chars": len(item.text),
                    }
                    for item, mode, verdict in results
                ],
                "scanned": len(results),
                "blocked": blocked,
            }
        )
    else:
        console = _console()
        table = Table(title=f"scan: {source}", title_justify="left")
        table.add_column("where")
        table.add_column("verdict")
        table.add_column("findings", overflow="fold")
        table.add_column("text", overflow="fold")
        listed = sorted(results, key=lambda r: not r[2].blocked)  # stable: blocked first, then file order
        if not show_all:
            listed = listed[:limit]
        for item, _, verdict in listed:
            if verdict.blocked:
                findings = "; ".join(
                    f"{f.category}/{f.rule}: {visible(f.excerpt, 60)!r}" for f in verdict.findings
                )
                table.add_row(
                    item.label,
                    Text("BLOCKED", style="bold red"),
                    Text(findings),
                    Text(visible(item.text, 120)),
                )
            else:
                notes = "; ".join(f"{f.category}/{f.rule}" for f in verdict.findings)
                table.add_row(
                    item.label, Text("ok", style="green"), Text(notes), Text(visible(item.text, 120))
                )
        console.print(table)
        if len(listed) < len(results):
            console.print(Text(f"{len(results) - len(listed):,} more items not listed (--all lists them, --json too)"))
        console.print(Text(f"{len(results):,} scanned, {blocked:,} blocked"))
    if blocked:
        raise typer.Exit(EXIT_BLOCKED)


# --------------------------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------------------------
@app.command()
def tokens(
    ctx: typer.Context,
    home: str | None = HOME_OPTION,
    encoding: str = typer.Option(
        "o200k_base", "--encoding", help="tiktoken encoding (o200k_base, cl100k_base)."
    ),
    providers: int = typer.Option(5, "--providers", help="Rows of the what-if table (N external providers)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """The token report for the configured setup: fence overhead, tool schemas, snapshot, what-if table."""
    from .analysis.tokens import TokenCounter, TokenReport

    opts = _opts(ctx, home)
    if providers < 1:
        raise CLIError(f"--providers must be at least 1, got {providers}")
    counter = TokenCounter(encoding)
    with _manager(opts) as manager:
        session = manager.start_session("ironmem-cli-tokens")
        report = TokenReport.for_session(session, counter, max_external=providers)
        session.end()
        budget = manager.tool_budget_status()
    if as_json:
        echo_json({**report.to_dict(), "tool_budget": budget})
        return
    from .demo import print_token_report

    console = _console()
    print_token_report(report, console)
    console.print(Text(_budget_line(budget)))


def _budget_line(budget: dict[str, Any]) -> str:
    """One line on rule 1's token budget for the external provider's tool schemas."""
    line = f"external tool budget: {budget['used']:,} of {budget['limit']:,} tokens"
    if budget.get("tools"):
        line += " (" + ", ".join(f"{name} {n:,}" for name, n in budget["tools"].items()) + ")"
    else:
        line += " (no external provider tools)"
    if budget.get("hidden"):
        line += f"; hidden by config: {', '.join(budget['hidden'])}"
    if budget.get("method"):
        line += f"; counted with {budget['method']}"
    return line + ". Set memory.tool_budget to change the limit, a provider section's tools: [...] to choose tools."


# --------------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------------
_POLICY_OPTION = typer.Option(
    None,
    "--policy",
    "-p",
    help="Provider policy, repeatable: openai[:MODEL], anthropic[:MODEL], vllm, gemini[:MODEL], "
    "deepseek. Default: openai:gpt-4.1, anthropic:claude-sonnet-4-5 and vllm.",
)
_STRATEGY_OPTION = typer.Option(
    None, "--strategy", "-s", help="Memory strategy, repeatable (default: all four)."
)


@app.command()
def simulate(
    turns: int = typer.Option(30, "--turns", help="User turns in the scripted session."),
    write_every: int = typer.Option(5, "--write-every", help="A memory write every N turns (0: never)."),
    policy: list[str] = _POLICY_OPTION,
    strategy: list[str] = _STRATEGY_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Replay a scripted session under each memory strategy and provider policy: cached share and cost."""
    from .demo import DemoError, run_simulation

    if not 1 <= turns <= MAX_SIMULATED_TURNS:
        raise CLIError(
            f"--turns must be between 1 and {MAX_SIMULATED_TURNS}, got {turns}: the simulation keeps every "
            "request's tokens, and with replayed history they grow with the square of the turns"
        )
    if write_every < 0:
        raise CLIError(f"--write-every must be 0 (never) or more, got {write_every}")
    policies = list(policy) if policy else None
    strategies = list(strategy) if strategy else None
    console = _console()
    try:
        rows = run_simulation(
            turns=turns,
            write_every=write_every,
            policies=policies,
            strategies=strategies,
            progress=None if as_json else console,
        )
    except DemoError as exc:
        raise CLIError(str(exc)) from None
    if as_json:
        echo_json({"turns": turns, "write_every": write_every, "results": rows})
        return
    print_simulation(
        rows,
        console,
        title=f"{turns}-turn session, a memory write every {write_every} turns"
        if write_every
        else f"{turns}-turn session, no memory writes",
    )


def print_simulation(rows: Sequence[dict[str, Any]], console: Console, title: str = "") -> None:
    """Render :func:`ironmem.demo.run_simulation` rows as a table."""
    table = Table(title=title or None, title_justify="left")
    for column in (
        "policy",
        "strategy",
        "requests",
        "input tokens",
        "cached",
        "cost",
        "no cache",
        "saved",
        "of max",
    ):
        table.add_column(
            column,
            justify="left" if column in ("policy", "strategy") else "right",
            no_wrap=column in ("policy", "strategy"),
        )
    last_policy = None
    for row in rows:
        label = row["policy"] if row["policy"] != last_policy else ""
        last_policy = row["policy"]
        of_max = "-" if row.get("of_theoretical_max") is None else f"{row['of_theoretical_max']:.0%}"
        table.add_row(
            label,
            row["strategy"],
            str(row["requests"]),
            f"{row['input_tokens']:,}",
            f"{row['cached_share']:.1%}",
            f"${row['cost_usd']:.4f}",
            f"${row['cost_without_cache_usd']:.4f}",
            f"{row['savings']:.0%}",
            of_max,
        )
    console.print(table)


# --------------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------------
@app.command()
def demo(
    ctx: typer.Context,
    home: str | None = HOME_OPTION,
    framework: str = typer.Option(
        "langchain", "--framework", "-f", help="langchain, llama-index, or plain (the core API, no framework)."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="A real chat model as provider:name (openai:gpt-4.1-mini, anthropic:claude-sonnet-4-5; needs its "
        "API key), or local (SmolLM2-135M on llama.cpp in this process, offline; extra ironmem[local]). "
        "Default: the scripted offline model.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the demo's record as JSON."),
) -> None:
    """A scripted two-session agent run: frozen snapshot, fenced recall, memory write, token and cache report."""
    from .demo import DemoError, run_demo

    opts = _opts(ctx, home)
    demo_home = None
    if opts.home or os.environ.get("IRONMEM_HOME"):
        demo_home = _demo_home(opts.home)
    try:
        run_demo(
            framework=framework,
            model=model,
            home=demo_home,
            console=None if as_json else _console(),
            as_json=as_json,
        )
    except DemoError as exc:
        raise CLIError(str(exc)) from None


def _demo_home(home: str | None) -> Path:
    """The demo may create its home (unlike the inspecting commands), but not inside a file."""
    from .core.home import HomeLocation, default_home

    path = Path(home).expanduser() if home else default_home()
    if path.exists() and not path.is_dir():
        raise CLIError(f"memory home {path} is not a folder; pass a folder for --home")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create memory home {path}: {exc.strerror or exc}") from None
    location = HomeLocation(path, "--home" if home else "IRONMEM_HOME", os.access(path, os.W_OK | os.X_OK))
    location.require_writable("`ironmem demo`")
    return path



register_all(app, COMMAND_MODULES)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------
def _fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    one_line = " ".join(str(message).split())
    sys.stderr.write(f"ironmem: error: {one_line}\n")
    sys.stderr.flush()
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``ironmem`` command (``argv`` defaults to ``sys.argv[1:]``); exits with its status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        args = ["--help"]
    debug = os.environ.get("IRONMEM_DEBUG") not in (None, "", "0")
    logger = logging.getLogger("ironmem")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    try:
        _run(args, debug)
    except KeyboardInterrupt:  # an interrupt outside the command itself (imports, option parsing)
        _fail(_INTERRUPTED, EXIT_INTERRUPTED)
    finally:  # leave logging as it was (matters when main() is called in-process, e.g. from tests)
        logger.handlers[:], logger.propagate, logger.level = saved[0], saved[1], saved[2]


#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
_INTERRUPTED = ("interrupted (Ctrl-C); stopped. Memory files are replaced whole, so none is half-written; "
                "run the command again to finish")

#: Options of the root command that may also be written after the command name (``ironmem status --config x``).
_GLOBAL_VALUE_OPTIONS = ("--home", "--config")
_GLOBAL_FLAGS = ("--verbose", "-v")


def _hoist_global_options(args: list[str]) -> list[str]:
    """Move global options written after the command name in front of it, so that both orders work. A command
    with an option of the same name (``demo --home``) keeps its own."""
    from typer.main import get_command

    group = get_command(app)
    commands = getattr(group, "commands", {})
    position = next((i for i, a in enumerate(args) if a in commands), None)
    if position is None:
        return args
    own = {opt for param in commands[args[position]].params for opt in getattr(param, "opts", [])}
    front, rest, i = list(args[:position]), [args[position]], position + 1
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if name in _GLOBAL_VALUE_OPTIONS and name not in own:
            if "=" in arg:
                front.append(arg)
            else:
                front.extend(args[i:i + 2])
                i += 1
        elif arg in _GLOBAL_FLAGS and arg not in own:
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def _warn_unknown_environment() -> None:
    from .core.config import unknown_environment_variables

    for var in unknown_environment_variables():
        sys.stderr.write(f"ironmem: warning: environment variable {var} sets nothing (a typo?); see `ironmem --help`\n")


def _run(args: list[str], debug: bool) -> None:
    from .core.errors import IronMemError

    try:
        args = _hoist_global_options(args)
        _warn_unknown_environment()
        code = app(args=args, prog_name="ironmem", standalone_mode=False)
    except CLIError as exc:
        _fail(str(exc), exc.code)
    except KeyboardInterrupt:
        _fail(_INTERRUPTED, EXIT_INTERRUPTED)
    except IronMemError as exc:
        if debug:
            raise
        _fail(str(exc))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError) as exc:
        if debug:
            raise
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            _fail(_click_message(exc), int(getattr(exc, "exit_code", EXIT_ERROR)) or EXIT_ERROR)
        _fail(f"{type(exc).__name__}: {exc} (set IRONMEM_DEBUG=1 for the traceback)")
    except Exception as exc:  # click's UsageError/Abort (vendored in recent typer) land here too
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            _fail(_click_message(exc), int(getattr(exc, "exit_code", EXIT_ERROR)) or EXIT_ERROR)
        if type(exc).__name__ == "Abort":
            _fail("aborted", 1)
        if debug:
            raise
        _fail(f"unexpected {type(exc).__name__}: {exc} (set IRONMEM_DEBUG=1 for the traceback)")
    if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a silent Exit(130)
        _fail(_INTERRUPTED, EXIT_INTERRUPTED)
    if isinstance(code, int) and code:
        sys.exit(code)


def _click_message(exc: BaseException) -> str:
    message = exc.format_message()  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command_path", "ironmem") if ctx is not None else "ironmem"
    return f"{message} (see `{command} --help`)"


if __name__ == "__main__":
    main()
