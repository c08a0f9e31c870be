"""What the shipped providers' tools have in common: JSON results and the search tool's arguments."""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import IronMemError
from ..core.provider import ToolSchema

__all__ = ["ok", "err", "search_schema", "search_args", "ToolArgumentError"]

MAX_LIMIT = 20


class ToolArgumentError(IronMemError, ValueError):
    """A tool call's arguments are wrong; the message goes back to the model as a JSON error."""


def ok(**fields: Any) -> str:
    """A successful tool result."""
    return json.dumps({"success": True, **fields}, ensure_ascii=False, default=str)


def err(message: str, **fields: Any) -> str:
    """A failed tool result that tells the model what to do."""
    return json.dumps({"success": False, "error": message, **fields}, ensure_ascii=False, default=str)


def search_schema(name: str, description: str) -> ToolSchema:
    """A search tool taking ``query`` and an optional ``limit`` (1-20)."""
    return ToolSchema(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, in natural language."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": "Maximum results (default 5).",
                },
            },
            "required": ["query"],
        },
    )


def search_args(args: Any, default_limit: int) -> tuple[str, int]:
    """Check a search call's arguments; raises :class:`ToolArgumentError` saying what is wrong."""
    if not isinstance(args, dict):
        raise ToolArgumentError("arguments must be a JSON object")
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolArgumentError("'query' is required: the text to search for")
    limit = args.get("limit", default_limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ToolArgumentError(f"'limit' must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return query, limit
