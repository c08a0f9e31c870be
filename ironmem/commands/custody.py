"""``ironmem review`` (held writes: list, approve, reject) and ``ironmem audit`` (entries by origin, re-checked under
the current policy; remove everything one source planted, with a backup). See docs/custody.md.

Registered by ``ironmem/cli.py`` through :func:`register`; the commands only parse, call the public API and render.
"""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from .common import HOME_OPTION, CLIError
from .common import console as _console
from .common import echo_json as _echo_json
from .common import manager as _manager
from .common import opts as _opts
from .common import visible as _visible

__all__ = ["register"]


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) if ts else ""


def _pending_row(p: Any) -> dict[str, Any]:
    return {"id": p.id, "status": p.status, "created": _when(p.created), "origin": p.provenance.label,
            "inputs": list(p.provenance.inputs), "session": p.provenance.session, "user": p.provenance.user,
            "summary": p.summary, "texts": p.texts, "scopes": p.scopes, "decided_by": p.decided_by,
            "decided": _when(p.decided_at), "note": p.note}


def _audit_rows(manager: Any, user: str | None) -> list[dict[str, Any]]:
    """Every entry of the files ``user`` sees, with its provenance and the current policy's verdict on it."""
    builtin = manager.builtin
    scopes = manager.scopes_for(user)
    rows: list[dict[str, Any]] = []
    for target in ("memory", "user"):
        state = builtin.file(target, scopes[target]).read()
        known = builtin.custody.entry_provenance(scopes[target], target, state.entries)
        for number, entry in enumerate(state.entries, 1):
            prov = known[entry]
            hidden = builtin.policy.snapshot_blocks(entry, prov)
            write = builtin.policy.decide_write(entry, prov)
            rows.append({
                "target": target, "number": number, "text": entry, "origin": prov.label,
                "inputs": list(prov.inputs), "session": prov.session, "approved_by": prov.approved_by,
                "written": _when(prov.ts), "snapshot": "hidden: " + hidden.reason if hidden else "shown",
                "policy_now": write.verdict.value,
            })
    return rows


def _planted_by(row: dict[str, Any], source: str) -> bool:
    """True when the entry came from ``source`` ("tool web_fetch", "web_fetch", "hand_edit"...) or was written in
    a turn that read it."""
    labels = [row["origin"], *row["inputs"]]
    return any(label == source or label.split(" ", 1)[-1] == source for label in labels)


def register(app: typer.Typer) -> None:
    """Add ``review`` and ``audit`` to the ``ironmem`` command."""

    @app.command()
    def review(
        ctx: typer.Context,
        home: str | None = HOME_OPTION,
        approve: str | None = typer.Option(None, "--approve", help="Approve the held write with this id."),
        reject: str | None = typer.Option(None, "--reject", help="Reject the held write with this id."),
        note: str = typer.Option("", "--note", help="Why (kept with a rejection)."),
        status: str = typer.Option("pending", "--status", help="List pending, approved, rejected or all."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Memory writes held for approval (made after untrusted content entered a turn): list them with where
        they came from, approve one (it is saved as a normal write) or reject one (dropped, the record kept)."""
        from rich.table import Table
        from rich.text import Text

        from ..core.errors import IronMemError, OperationError

        opts = _opts(ctx, home)
        if approve and reject:
            raise CLIError("give --approve or --reject, not both")
        if status not in ("pending", "approved", "rejected", "all"):
            raise CLIError(f"--status must be pending, approved, rejected or all, got {status!r}")
        with _manager(opts, read_only=not (approve or reject)) as manager:
            builtin = manager.builtin
            if approve or reject:
                try:
                    done = (builtin.approve(approve, by="ironmem review") if approve else
                            builtin.reject(reject or "", by="ironmem review", note=note))
                except OperationError as exc:
                    raise CLIError(f"could not apply held write {approve}: {exc}. It stays pending") from exc
                except IronMemError as exc:
                    raise CLIError(str(exc)) from exc
                if as_json:
                    _echo_json(_pending_row(done))
                else:
                    verb = "approved and saved" if approve else "rejected"
                    _console().print(Text(f"{verb} held write {done.id} ({done.summary}, from {done.provenance.label})"))
                return
            rows = [_pending_row(p) for p in builtin.pending(status=status)]
        if as_json:
            _echo_json(rows)
            return
        console = _console()
        if not rows:
            console.print(Text(f"no {status} writes" if status != "all" else "no held writes"))
            return
        table = Table("id", "status", "created", "from", "made after", "write")
        for row in rows:
            table.add_row(row["id"], row["status"], row["created"], row["origin"], ", ".join(row["inputs"]),
                          Text(f"{row['summary']}: " + _visible(" | ".join(row["texts"]), 100)))
        console.print(table)
        console.print(Text("approve: ironmem review --approve ID   reject: ironmem review --reject ID --note WHY"))

    @app.command()
    def audit(
        ctx: typer.Context,
        home: str | None = HOME_OPTION,
        user: str | None = typer.Option(None, "--user", "-u", help="Audit this user id's files."),
        remove_source: str | None = typer.Option(
            None, "--remove-source",
            help="Remove every entry that came from this source or was written in a turn that read it "
                 "(for example 'tool web_fetch'), and reject its held writes. A backup is kept.",
        ),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Entries by origin, each re-checked under the current custody policy; optionally remove everything one
        source planted (entries and held writes), keeping a backup of the entries first."""
        import sys

        from rich.table import Table
        from rich.text import Text

        from ..core.builtin.tools import Operation
        from ..core.custody import Origin, Provenance

        opts = _opts(ctx, home)
        with _manager(opts, read_only=remove_source is None) as manager:
            rows = _audit_rows(manager, user)
            if remove_source is None:
                if as_json:
                    _echo_json(rows)
                    return
                table = Table("target", "#", "from", "made after", "snapshot", "policy now", "entry")
                for row in rows:
                    table.add_row(row["target"], str(row["number"]), row["origin"] + (
                        f" (approved by {row['approved_by']})" if row["approved_by"] else ""),
                                  ", ".join(row["inputs"]), row["snapshot"], row["policy_now"],
                                  Text(_visible(row["text"], 80)))
                _console().print(table)
                return
            doomed = [row for row in rows if _planted_by(row, remove_source)]
            held = [p for p in manager.builtin.pending()
                    if _planted_by({"origin": p.provenance.label, "inputs": list(p.provenance.inputs)}, remove_source)]
            if (doomed or held) and not yes:
                if not sys.stdin.isatty():
                    raise CLIError(f"about to remove {len(doomed)} entries and reject {len(held)} held writes from "
                                   f"{remove_source!r}; there is no terminal to confirm on: pass --yes")
                if not typer.confirm(f"Remove {len(doomed)} entries and reject {len(held)} held writes from "
                                     f"{remove_source!r}?"):
                    raise CLIError("nothing removed", code=1)
            backup = None
            if doomed:
                scopes = manager.scopes_for(user)
                folder = manager.home / ".ironmem" / "backups"
                folder.mkdir(parents=True, exist_ok=True)
                backup = folder / f"audit-{time.strftime('%Y%m%d-%H%M%S')}-{len(doomed)}.json"
                snapshot = {t: list(manager.builtin.file(t, scopes[t]).read().entries) for t in ("memory", "user")}
                backup.write_text(json.dumps({"removed_source": remove_source, "entries": snapshot,
                                              "removed": doomed}, ensure_ascii=False, indent=2), encoding="utf-8")
                operations = [Operation("remove", row["target"], old_text=row["text"]) for row in doomed]
                manager.builtin.apply_detailed(operations, scopes=scopes, provenance=Provenance(
                    Origin.USER, "ironmem audit"))
            for pending in held:
                manager.builtin.reject(pending.id, by="ironmem audit", note=f"removed source {remove_source}")
        result = {"removed": [{"target": r["target"], "text": r["text"], "origin": r["origin"]} for r in doomed],
                  "rejected": [p.id for p in held], "backup": str(backup) if backup else None}
        if as_json:
            _echo_json(result)
            return
        console = _console()
        console.print(Text(f"removed {len(doomed)} entries and rejected {len(held)} held writes from {remove_source}"))
        if backup:
            console.print(Text(f"the entries as they were are kept at {backup}"))
