"""The built-in tools: ``memory`` (add / replace / remove, or an all-or-nothing batch) and ``session_search``.

This module holds the pure logic: schemas, argument checking, and applying operations to entry lists. The
provider does the locking and I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import OperationError
from ..provider import ToolSchema
from .store import ENTRY_DELIMITER, format_usage, render_entries

__all__ = ["MEMORY_TOOL", "SEARCH_TOOL", "TARGETS", "Operation", "OperationError", "parse_operations", "apply_operation", "check_limit"]

TARGETS = ("memory", "user")
ACTIONS = ("add", "replace", "remove")
PREVIEW_CHARS = 80

_OPERATION_PROPERTIES: dict[str, Any] = {
    "action": {"type": "string", "enum": list(ACTIONS), "description": "add a new entry, replace or remove one."},
    "target": {
        "type": "string",
        "enum": list(TARGETS),
        "description": "memory = your own notes (MEMORY.md); user = facts about the user (USER.md).",
    },
    "content": {"type": "string", "description": "The entry text (add, replace)."},
    "old_text": {
        "type": "string",
        "description": "A substring that identifies exactly one existing entry (replace, remove).",
    },
}

MEMORY_TOOL = ToolSchema(
    name="memory",
    description=(
        "Save durable facts to persistent memory, shown at the start of future sessions. "
        "Use target=user for who the user is and their preferences, target=memory for your own notes. "
        "Keep entries short; replace or remove stale ones. Use `operations` to apply several changes at once "
        "(all or nothing)."
    ),
    parameters={
        "type": "object",
        "properties": {
            **_OPERATION_PROPERTIES,
            "operations": {
                "type": "array",
                "description": "Several changes applied together; if one fails, none is applied.",
                "items": {
                    "type": "object",
                    "properties": _OPERATION_PROPERTIES,
                    "required": ["action", "target"],
                },
            },
        },
    },
    provider="builtin",
)

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


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _operation(raw: Any, where: str) -> Operation:
    if not isinstance(raw, dict):
        raise OperationError(f"{where} must be an object with action and target, got {type(raw).__name__}")
    action = raw.get("action")
    target = raw.get("target", "memory")
    if action not in ACTIONS:
        raise OperationError(f"{where}: action must be one of {', '.join(ACTIONS)} (got {action!r})")
    if target not in TARGETS:
        raise OperationError(f"{where}: target must be 'memory' or 'user' (got {target!r})")
    content = raw.get("content") or ""
    old_text = raw.get("old_text") or ""
    if not isinstance(content, str) or not isinstance(old_text, str):
        raise OperationError(f"{where}: content and old_text must be strings")
    content = content.strip()
    if action in ("add", "replace") and not content:
        raise OperationError(f"{where}: '{action}' needs non-empty content")
    if action in ("replace", "remove") and not old_text.strip():
        raise OperationError(f"{where}: '{action}' needs old_text, a substring of the entry to change")
    if ENTRY_DELIMITER.strip() in content.splitlines():
        raise OperationError(f"{where}: content must not contain a line holding only '§' (the entry separator)")
    return Operation(action, target, content, old_text.strip())


def parse_operations(args: dict[str, Any]) -> list[Operation]:
    """Turn tool arguments into a list of operations (one, or a batch)."""
    if not isinstance(args, dict):
        raise OperationError("arguments must be a JSON object")
    batch = args.get("operations")
    if batch is not None:
        if not isinstance(batch, list) or not batch:
            raise OperationError("operations must be a non-empty list of {action, target, content, old_text}")
        return [_operation(item, f"operations[{i}]") for i, item in enumerate(batch)]
    if "action" not in args:
        raise OperationError("give an action (add, replace, remove) and a target, or an operations list")
    return [_operation(args, "memory")]


def _find_unique(entries: list[str], old_text: str, target: str) -> int:
    matches = [i for i, entry in enumerate(entries) if old_text in entry]
    if not matches:
        raise OperationError(
            f"no {target} entry contains {old_text!r}",
            entries=[_preview(e) for e in entries],
        )
    if len(matches) > 1:
        raise OperationError(
            f"{len(matches)} {target} entries contain {old_text!r}; give a longer old_text that matches only one",
            matches=[_preview(entries[i]) for i in matches],
        )
    return matches[0]


def apply_operation(entries: list[str], op: Operation) -> tuple[list[str], bool]:
    """Apply ``op`` to a copy of ``entries``. Returns the new list and whether anything changed."""
    out = list(entries)
    if op.action == "add":
        if op.content in out:
            return out, False
        out.append(op.content)
        return out, True
    index = _find_unique(out, op.old_text, op.target)
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
    """Refuse a change whose result is over ``limit``; the error lists the current usage and entries."""
    used = len(render_entries(new_entries))
    if used > limit:
        raise OperationError(
            f"{target} would be {used:,} chars, over its {limit:,}-char limit; nothing was written. "
            "Remove or shorten entries (replace/remove), then retry",
            usage=format_usage(len(render_entries(current)), limit),
            entries=[_preview(e) for e in current],
        )
