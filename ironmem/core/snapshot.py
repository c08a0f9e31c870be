"""Rule 3: the memory block of the system prompt, rendered once per session.

Rendering is deterministic: the same files give the same bytes on any machine (no timestamps, no absolute
paths, no dict-order surprises). Every entry is scanned; one that fails is replaced by ``[BLOCKED: <category>]``
so the model never sees it but the user can still find and remove it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .builtin.store import FileState, format_usage
from .errors import InvalidArgumentError
from .fence import sanitize
from .security import ScanResult, scan

__all__ = ["Snapshot", "render_snapshot", "render_entry"]

_TITLES = {
    "memory": "MEMORY (your notes, from earlier sessions)",
    "user": "USER PROFILE (what you know about the user)",
}
_HEADER = "Persistent memory. Frozen at session start: changes you save now appear from the next turn's recall."


def _first_category(verdict: ScanResult) -> str:
    """The category of the earliest finding (ties broken by name), so rendering never depends on set order."""
    first = min(verdict.findings, key=lambda f: (f.span[0], f.category, f.rule))
    return first.category


def render_entry(entry: str, target: str, position: int) -> str:
    """One entry as shown to the model: sanitized, or a BLOCKED marker when it fails the scan."""
    verdict = scan(entry)
    if verdict.blocked:
        file_name = "MEMORY.md" if target == "memory" else "USER.md"
        return (
            f"[BLOCKED: {_first_category(verdict)}] (entry {position} of {file_name} failed the security scan "
            "and is hidden; run `ironmem show` to review and remove it)"
        )
    return sanitize(entry)


@dataclass(frozen=True)
class Snapshot:
    """The frozen system-prompt block of one session and what it was made from."""

    text: str
    entries: dict[str, tuple[str, ...]]

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form, so an adapter can keep the snapshot in a checkpoint and resume the session."""
        return {"text": self.text, "entries": {t: list(e) for t, e in self.entries.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        """Inverse of :meth:`to_dict`. Raises ValueError naming what is missing."""
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise InvalidArgumentError("a saved snapshot needs a 'text' string (from Snapshot.to_dict())")
        entries = data.get("entries") or {}
        return cls(data["text"], {t: tuple(entries.get(t, ())) for t in ("memory", "user")})


def render_snapshot(states: dict[str, FileState], limits: dict[str, int], external_blocks: Sequence[str] = ()) -> Snapshot:
    """Render the built-in files (and any external provider's static block) into one text."""
    parts = [_HEADER]
    for target in ("memory", "user"):
        state = states[target]
        title = f"## {_TITLES[target]} [{format_usage(state.chars, limits[target])}]"
        if state.corrupt:
            backup = f".ironmem/backups/{state.backup.name}" if state.backup else "no copy"
            body = f"[UNREADABLE: {state.corrupt}; a copy is at {backup}]"
        elif not state.entries:
            body = "(empty)"
        else:
            body = "\n§\n".join(render_entry(e, target, i + 1) for i, e in enumerate(state.entries))
        parts.append(f"{title}\n{body}")
    for block in external_blocks:
        block = block.strip()
        if block:
            parts.append(block)
    return Snapshot("\n\n".join(parts), {t: states[t].entries for t in ("memory", "user")})
