"""The built-in tools: ``memory`` (add / replace / remove, or an all-or-nothing batch) and ``session_search``.

This module holds the pure logic: schemas, argument checking, and applying operations to entry lists. The
provider does the locking and I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import OperationError
from ..provider import ToolSchema
from ..text import lone_surrogate
from .store import ENTRY_DELIMITER, normalize_newlines

__all__ = [
    "MEMORY_TOOL",
    "SEARCH_TOOL",
    "TARGETS",
    "Operation",
    "OperationError",
    "apply_operation",
    "check_limit",
    "find_entry",
    "memory_tool_schema",
    "parse_operations",
    "preview",
]

TARGETS = ("memory", "user")
ACTIONS = ("add", "replace", "remove")
PREVIEW_CHARS = 80

_ACTION = {"type": "string", "enum": list(ACTIONS), "description": "add a new entry, replace or remove one."}
_TARGET = {
    "type": "string",
    "enum": list(TARGETS),
    "description": "memory = your own notes (MEMORY.md); user = facts about the user (USER.md).",
}
_CONTENT = {"type": "string", "description": "The entry text (add, replace): the COMPLETE new entry."}
_OLD_TEXT = {
    "type": "string",
    "description": "REQUIRED for replace and remove: a short substring that identifies exactly one existing entry.",
}

#: What the ``memory`` tool tells the model (Hermes's curated-memory guidance, in ironmem's words).
MEMORY_GUIDANCE = (
    "Save durable facts to persistent memory, shown at the start of every future session: short, declarative, "
    "high-signal entries. HOW: put several changes in ONE call with 'operations' ({action, content?, old_text?} "
    "each): the batch is atomic (all or nothing) and the limit is checked on the final result. replace/remove "
    "find an entry by a short unique substring (old_text); replace writes the COMPLETE new entry. WHEN: the user "
    "states a preference, correction or personal detail, or you learn a stable fact about their environment, "
    "conventions or workflow. TARGETS: 'user' = who the user is; 'memory' = your notes (environment, conventions, "
    "tool quirks, lessons). SKIP: trivial or easily re-found facts, raw data, task progress, completed-work logs, "
    "temporary TODO state (past conversations are searchable with session_search). Reusable procedures belong in "
    "a skill, not in memory."
)

_NOTES_SCOPE = {
    "shared": " Notes (target='memory') are SHARED with every user of this app: nothing about this user there; "
              "target='user' is private to them.",
    "private": " Both targets are private to the current user: no other user sees them.",
}

#: LlamaIndex refuses a tool description over 1,024 characters; the longest variant stays under it.
MAX_DESCRIPTION_CHARS = 1024


def memory_tool_schema(notes: str | None = None) -> ToolSchema:
    """The ``memory`` tool, its description saying who sees the agent's notes.

    ``notes``: ``"shared"`` (a user session whose MEMORY.md is shared between users), ``"private"`` (a user
    session whose MEMORY.md is the user's own) or None (no user ids: one person's memory, nothing to say).

    Example:
        >>> "SHARED" in memory_tool_schema("shared").description
        True
    """
    extra = _NOTES_SCOPE.get(notes or "", "")
    return ToolSchema(
        name="memory",
        description=MEMORY_GUIDANCE + extra,
        parameters={
            "type": "object",
            "properties": {
                "action": _ACTION,
                "target": _TARGET,
                "content": _CONTENT,
                "old_text": _OLD_TEXT,
                "operations": {
                    "type": "array",
                    "description": (
                        "Several changes applied together, atomically, against the final size limit; if one "
                        "fails, none is applied. An item without a target uses the top-level target."
                    ),
                    "items": {
                        "type": "object",
                        "properties": {"action": _ACTION, "target": _TARGET, "content": _CONTENT,
                                       "old_text": _OLD_TEXT},
                        "required": ["action"],
                    },
                },
            },
            "required": ["target"],
        },
        provider="builtin",
    )


MEMORY_TOOL = memory_tool_schema()

SEARCH_TOOL = ToolSchema(
    name="session_search",
    description=(
        "Full-text search over saved memory entries and past conversation turns. "
        "Use it to recall something discussed in an earlier session."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for (any language)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Maximum results (default 5)."},
        },
        "required": ["query"],
    },
    provider="builtin",
)


@dataclass(frozen=True)
class Operation:
    action: str
    target: str
    content: str = ""
    old_text: str = ""


def preview(text: str, width: int = PREVIEW_CHARS) -> str:
    """One line, at most ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


_preview = preview


def _text_field(raw: dict[str, Any], *names: str) -> Any:
    for name in names:
        value = raw.get(name)
        if value is not None and value != "":
            return value
    return ""


def _operation(raw: Any, where: str, default_target: str, *, single: bool) -> Operation:
    if not isinstance(raw, dict):
        raise OperationError(f"{where} must be an object with an action, got {type(raw).__name__}")
    action = raw.get("action")
    target = raw.get("target")
    if target is None or target == "":
        target = default_target
    if action not in ACTIONS:
        raise OperationError(f"{where}: action must be one of {', '.join(ACTIONS)} (got {action!r})")
    if target not in TARGETS:
        raise OperationError(f"{where}: invalid target {target!r}; use 'memory' or 'user'")
    content = _text_field(raw, "content", "new_text")  # new_text: the patch tool's name, accepted like Hermes
    old_text = raw.get("old_text") or ""
    if not isinstance(content, str) or not isinstance(old_text, str):
        raise OperationError(f"{where}: content and old_text must be strings")
    content = content.strip()
    if action in ("replace", "remove") and not old_text.strip():
        raise OperationError(
            f"{where}: '{action}' needs old_text -- a short unique substring of the entry to {action}. None was "
            f"provided. Reissue the {action} with old_text set to part of one of the current entries",
            show_entries=target if single else None,
        )
    if action in ("add", "replace") and not content:
        if action == "replace":
            raise OperationError(f"{where}: content is required for 'replace' (the complete new entry); "
                                 "use action 'remove' to delete an entry")
        raise OperationError(f"{where}: content is required for 'add' (the text of the new entry)")
    if ENTRY_DELIMITER.strip() in normalize_newlines(content).split("\n"):
        raise OperationError(f"{where}: content must not contain a line holding only '§' (the entry separator)")
    for name, value in (("content", content), ("old_text", old_text)):
        bad = lone_surrogate(value)
        if bad is not None:
            raise OperationError(
                f"{where}: {name} holds a lone UTF-16 surrogate (U+{ord(value[bad]):04X}) at character {bad}, which "
                "a UTF-8 file cannot store (half of an emoji or other character, usually cut from a JSON "
                "escape); send the whole character or remove it. Nothing was written"
            )
    return Operation(action, target, content, old_text.strip())


def parse_operations(args: dict[str, Any]) -> list[Operation]:
    """Turn tool arguments into a list of operations (one, or a batch).

    ``target`` may be omitted or null (it means ``memory``); in a batch, an item without a target uses the
    top-level one. ``new_text`` is accepted for ``content``.
    """
    if not isinstance(args, dict):
        raise OperationError("arguments must be a JSON object")
    default_target = args.get("target")
    if default_target is None or default_target == "":
        default_target = "memory"
    if default_target not in TARGETS:
        raise OperationError(f"invalid target {default_target!r}; use 'memory' or 'user'")
    batch = args.get("operations")
    if batch is not None and batch != []:
        if not isinstance(batch, list):
            raise OperationError("operations must be a non-empty list of {action, target, content, old_text}")
        return [_operation(item, f"operation {i + 1}", default_target, single=False) for i, item in enumerate(batch)]
    if args.get("action") in (None, ""):
        raise OperationError(
            "Missing required parameter: give an action (add, replace or remove) with its content/old_text, "
            "or an operations list of such changes"
        )
    return [_operation(args, "memory", default_target, single=True)]


def find_entry(entries: list[str], old_text: str, target: str) -> int:
    """The index of the one entry ``old_text`` names: an entry equal to it wins, else the unique entry holding it."""
    try:
        return entries.index(old_text)
    except ValueError:
        pass
    matches = [i for i, entry in enumerate(entries) if old_text in entry]
    if not matches:
        raise OperationError(
            f"No entry matched {old_text!r} in {target}; nothing was written. Check the current entries and "
            "retry with a substring of the entry you mean",
            show_entries=target,
        )
    if len({entries[i] for i in matches}) > 1:
        raise OperationError(
            f"Multiple entries matched {old_text!r} in {target} ({len(matches)}); nothing was written. Be more "
            "specific: give a longer old_text that matches only one",
            matches=[preview(entries[i]) for i in matches],
        )
    return matches[0]


_find_unique = find_entry


def apply_operation(entries: list[str], op: Operation) -> tuple[list[str], bool]:
    """Apply ``op`` to a copy of ``entries``. Returns the new list and whether anything changed."""
    out = list(entries)
    if op.action == "add":
        if op.content in out:
            return out, False
        out.append(op.content)
        return out, True
    index = find_entry(out, op.old_text, op.target)
    if op.action == "remove":
        del out[index]
        return out, True
    if out[index] == op.content:
        return out, False
    if op.content in out:  # replacing with an entry that already exists: keep one copy
        del out[index]
    else:
        out[index] = op.content
    return out, True


def check_limit(new_entries: list[str], current: list[str], limit: int, target: str) -> None:
    """Refuse a change whose result is over ``limit`` and larger than now.

    A change that shrinks an over-limit file (a remove, a shorter replace) is allowed: it is how a user gets
    back under the limit (Hermes allows remove there too).
    """
    used = len(ENTRY_DELIMITER.join(new_entries))
    now = len(ENTRY_DELIMITER.join(current))
    if used > limit and used > now:
        raise OperationError(
            f"{target} would be {used:,} chars, over its {limit:,}-char limit; nothing was written. Consolidate "
            "now: 'replace' overlapping entries with shorter ones or 'remove' stale ones (see current_entries), "
            "then retry -- one batch (operations) can do both",
            show_entries=target,
            limit=True,
        )
