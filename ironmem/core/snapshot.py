"""Rule 3: the memory block of the system prompt, rendered once per session.

Rendering is deterministic: the same files give the same bytes on any machine (no timestamps, no absolute
paths, no dict-order surprises). Every entry is scanned; one that fails is replaced by ``[BLOCKED: <category>]``
so the model never sees it but the user can still find and remove it.

Every entry is a list item (``- ``) whose further lines are marked (:func:`~ironmem.core.fence.frame_record`),
after the same neutralization as recalled text (:func:`~ironmem.core.fence.sanitize`): no line of an entry can
stand at the start of a line as a role, a header, another entry, a section title or an end-of-memory marker,
whatever a hand edit put in the file. Held (pending) writes are never here: they are not in the files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .builtin.store import FileState, format_usage
from .custody import Provenance
from .errors import InvalidArgumentError
from .fence import frame_record, sanitize
from .security import ScanResult
from .security.policy import Policy

__all__ = ["Snapshot", "render_cap", "render_entry", "render_snapshot"]

_TITLES = {
    "memory": "MEMORY (your notes, from earlier sessions)",
    "user": "USER PROFILE (what you know about the user)",
}
_HEADER = "Persistent memory. Frozen at session start: changes you save now appear from the next turn's recall."


def _first_category(verdict: ScanResult) -> str:
    """The category of the earliest finding (ties broken by name), so rendering never depends on set order."""
    first = min(verdict.findings, key=lambda f: (f.span[0], f.category, f.rule))
    return first.category


_DEFAULT_POLICY = Policy()


def render_entry(entry: str, target: str, position: int, *, provenance: Provenance | None = None,
                 policy: Policy | None = None) -> str:
    """One entry as shown to the model: sanitized, or a BLOCKED marker when the policy's re-scan hides it (an
    entry of the user's own words only for hidden text; see
    :meth:`~ironmem.core.security.policy.Policy.snapshot_blocks`)."""
    verdict = (policy or _DEFAULT_POLICY).snapshot_blocks(entry, provenance)
    if verdict is not None:
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


def render_cap(limit: int) -> int:
    """The most characters of one file the snapshot shows: twice its limit, at least 4,000 (Hermes's cap)."""
    return max(2 * limit, 4000)


def _items(parts: Sequence[str]) -> str:
    """Rendered entries as the snapshot's list: one item each, further lines marked."""
    return "\n".join("- " + frame_record(part) for part in parts)


Custody = Callable[[str, int], str]


def _capped_body(entries: Sequence[str], target: str, limit: int, render: Custody | None = None) -> str:
    """The entries as shown, capped at :func:`render_cap`: the first ~70% and the last ~20% of the budget are
    kept (whole entries where they fit; an entry too long for its part is cut), with a visible marker between
    them saying how much was left out and how to get back under the limit. Only shown text is scanned."""
    show_entry: Custody = render or (lambda text, position: render_entry(text, target, position))
    joined = len("\n§\n".join(entries))
    cap = render_cap(limit)
    if joined <= cap:
        return _items([show_entry(e, i + 1) for i, e in enumerate(entries)])
    head_budget, tail_budget = int(cap * 0.7), int(cap * 0.2)
    head: list[tuple[int, str]] = []
    used = 0
    for i, entry in enumerate(entries):
        if used + len(entry) + 3 > head_budget:
            if not head:  # the first entry alone is larger than the head budget: show its beginning
                head.append((i, entry[: head_budget] + " [...entry cut]"))
            break
        head.append((i, entry))
        used += len(entry) + 3
    tail: list[tuple[int, str]] = []
    used = 0
    first_free = head[-1][0] + 1 if head else 0
    for i in range(len(entries) - 1, first_free - 1, -1):
        entry = entries[i]
        if used + len(entry) + 3 > tail_budget:
            if not tail:  # the last entry alone is larger than the tail budget: show its end
                tail.append((i, "[entry cut...] " + entry[-tail_budget:]))
            break
        tail.append((i, entry))
        used += len(entry) + 3
    tail.reverse()
    shown = sum(len(text) for _, text in head + tail)
    omitted_entries = len(entries) - len({i for i, _ in head} | {i for i, _ in tail})
    file_name = "MEMORY.md" if target == "memory" else "USER.md"
    marker = (
        f"[... {max(0, joined - shown):,} chars"
        + (f" ({omitted_entries:,} entries)" if omitted_entries else "")
        + f" not shown: {file_name} is over its limit ({joined:,}/{limit:,} chars). Consolidate with the memory "
        "tool (remove/replace) or edit the file; run `ironmem status` to see the sizes ...]"
    )
    parts = [show_entry(text, i + 1) for i, text in head] + [marker]
    parts += [show_entry(text, i + 1) for i, text in tail]
    return _items(parts)


def render_snapshot(
    states: dict[str, FileState],
    limits: dict[str, int],
    external_blocks: Sequence[str] = (),
    *,
    enabled: dict[str, bool] | None = None,
    provenance: dict[str, dict[str, Provenance]] | None = None,
    policy: Policy | None = None,
) -> Snapshot:
    """Render the built-in files (and any external provider's static block) into one text.

    A file over its limit is shown capped (see :func:`render_cap`) with a visible marker, never whole: a 10 MB
    hand-grown MEMORY.md must not reach the model. A target disabled in config (``enabled``) is left out.
    """
    parts = [_HEADER]
    shown: dict[str, tuple[str, ...]] = {}
    for target in ("memory", "user"):
        state = states.get(target)
        if state is None or (enabled is not None and not enabled.get(target, True)):
            shown[target] = ()
            continue
        shown[target] = state.entries
        usage = format_usage(state.chars, limits[target])
        title = f"## {_TITLES[target]} [{usage}]"
        if state.corrupt:
            backup = f".ironmem/backups/{state.backup.name}" if state.backup else "no copy"
            body = f"[UNREADABLE: {state.corrupt}; a copy is at {backup}]"
        elif not state.entries:
            body = "(empty)"
        else:
            known = (provenance or {}).get(target, {})

            def render(text: str, position: int, target: str = target, known: dict[str, Provenance] = known) -> str:
                return render_entry(text, target, position, provenance=known.get(text), policy=policy)

            body = _capped_body(state.entries, target, limits[target], render)
        parts.append(f"{title}\n{body}")
    for block in external_blocks:
        block = block.strip()
        if block:
            parts.append(block)
    return Snapshot("\n\n".join(parts), shown)
