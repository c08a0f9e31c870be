"""What the shipped providers' tools have in common: JSON results, the search tool's arguments, and a tool call
whose failure goes back to the model as a result, never as an exception."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from ..core.errors import ExternalServiceError, IronMemError
from ..core.provider import ToolSchema

__all__ = ["ok", "err", "run_tool", "search_schema", "search_args", "search_result", "ToolArgumentError"]

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


def search_result(args: Any, default_limit: int, search: Callable[[str, int], list[Any]]) -> str:
    """A search tool's result: ``search(query, limit)`` for checked arguments, as ``{results, count}``."""
    query, limit = search_args(args, default_limit)
    hits = search(query, limit)
    return ok(results=hits, count=len(hits))


def run_tool(name: str, args: Any, handle: Callable[[dict[str, Any]], str], *, log: logging.Logger, label: str,
             expected: tuple[type[Exception], ...] = ()) -> str:
    """Run one tool call: ``handle(args)`` once ``args`` is a JSON object; every failure becomes a JSON error result.

    - wrong arguments (:class:`ToolArgumentError`): the message, which says what to give;
    - a hosted service's failure (:class:`ExternalServiceError`): its message, and ``retry_after`` when it asked
      for a wait;
    - ``expected`` failures (a server's errors, already explained): ``"<tool> failed: <message>"``, a warning;
    - anything else: ``"<tool> failed: <type>: <message>"``, logged with its traceback.

    Example:
        >>> def handle(args): raise ToolArgumentError("give a query")
        >>> print(run_tool("demo_search", {}, handle, log=logging.getLogger("demo"), label="demo"))
        {"success": false, "error": "give a query"}
    """
    try:
        if not isinstance(args, dict):
            return err(f"arguments for {name!r} must be a JSON object")
        return handle(args)
    except ToolArgumentError as exc:
        return err(str(exc))
    except ExternalServiceError as exc:
        return err(str(exc), retry_after=exc.retry_after) if exc.retry_after else err(str(exc))
    except expected as exc:
        log.warning("%s tool %r failed: %s", label, name, exc)
        return err(f"{name} failed: {exc}")
    except Exception as exc:  # a tool result, never an exception, goes back to the model
        log.exception("%s tool %r failed", label, name)
        return err(f"{name} failed: {type(exc).__name__}: {exc}")
