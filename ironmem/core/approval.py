"""Asking a human about a held memory write: the request every adapter shows, and reading the answer.

The request has the shape of LangChain's ``HumanInTheLoopMiddleware`` interrupt (``action_requests`` and
``review_configs``), so an application that already answers those answers ironmem's the same way. The answer may
be a ``HITLResponse`` (``{"decisions": [{"type": "approve"}]}``), one decision (``{"type": "reject", "message":
...}``, ``{"type": "edit", "edited_action": {"name": "memory", "args": {...}}}``), or a plain ``"approve"`` /
``"reject"`` / ``True`` / ``False``. Anything else is answered with a clear error and the write stays pending.

Adapters only move these values between the framework and :func:`resolve_approval`; the decision itself is
:meth:`ironmem.Session.approve` / :meth:`ironmem.Session.reject`.

Example:
    >>> import json, tempfile
    >>> from ironmem import MemoryManager
    >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s")
    >>> _ = session.begin_turn("read the page")
    >>> _ = session.observe("page text", origin="tool", source="web_fetch")
    >>> held = staged_id(session.handle_tool_call("memory", {"action": "add", "content": "Likes tea"}))
    >>> approval_request(session, held, {})["review_configs"][0]["allowed_decisions"]
    ['approve', 'edit', 'reject']
    >>> json.loads(resolve_approval(session, held, {"decisions": [{"type": "approve"}]}))["saved"]
    True
    >>> "already approved" in json.loads(resolve_approval(session, held, "approve"))["error"]
    True
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from .errors import InvalidArgumentError, IronMemError, OperationError

if TYPE_CHECKING:
    from .session import Session

__all__ = ["ApprovalPolicy", "approval_request", "parse_decision", "resolve_approval", "staged_id"]

#: What an adapter does with a held write: ask now (an interrupt / a human-in-the-loop event) or leave it queued.
ApprovalPolicy = Literal["interrupt", "queue"]

_WORDS = {"approve": "approve", "approved": "approve", "yes": "approve", "y": "approve", "accept": "approve",
          "reject": "reject", "rejected": "reject", "no": "reject", "n": "reject", "deny": "reject"}
_SHAPE = ("{'decisions': [{'type': 'approve'}]}, {'type': 'edit', 'edited_action': {'name': 'memory', 'args': "
          "{...}}}, {'type': 'reject', 'message': '...'}, or 'approve' / 'reject'")


def staged_id(result: str) -> str | None:
    """The pending id in a ``memory`` tool result that held the write, else None."""
    if '"staged"' not in result:
        return None
    try:
        data = json.loads(result)
    except (ValueError, TypeError):
        return None
    if isinstance(data, dict) and data.get("staged") and isinstance(data.get("pending_id"), str):
        return str(data["pending_id"])
    return None


def approval_request(session: Session, pending_id: str, args: dict[str, Any]) -> dict[str, Any]:
    """The question for the human, shaped like a ``HumanInTheLoopMiddleware`` request (plus ironmem's fields)."""
    found = session.manager.builtin.custody.get(pending_id)
    origin = found.provenance.label if found is not None else "unknown"
    inputs = ", ".join(found.provenance.inputs) if found is not None and found.provenance.inputs else origin
    description = (
        f"A memory write was held for your approval (pending {pending_id}): it was made after untrusted content "
        f"({inputs}) entered the conversation, so it may have been planted. Approve to save it, edit to change it, "
        "or reject to drop it."
    )
    return {
        "action_requests": [{"name": "memory", "args": dict(args), "description": description}],
        "review_configs": [{"action_name": "memory", "allowed_decisions": ["approve", "edit", "reject"]}],
        "ironmem": {"pending_id": pending_id, "origin": origin,
                    "write": found.payload if found is not None else dict(args)},
    }


def parse_decision(value: Any) -> tuple[str, dict[str, Any] | None, str]:
    """``(kind, edited args or None, message)`` for a resume value; kind is approve, edit or reject.

    Raises :class:`~ironmem.core.errors.IronMemError` (an ``InvalidArgumentError``) naming the accepted shapes.
    """

    if isinstance(value, dict) and "decisions" in value:
        decisions = value["decisions"]
        if not isinstance(decisions, list) or len(decisions) != 1:
            raise InvalidArgumentError(f"expected exactly one decision for the held memory write; use {_SHAPE}")
        value = decisions[0]
    if isinstance(value, bool):
        return ("approve" if value else "reject"), None, ""
    if isinstance(value, str) and value.strip().lower() in _WORDS:
        return _WORDS[value.strip().lower()], None, ""
    if isinstance(value, dict):
        kind = value.get("type")
        found = value.get("message")
        message = found if isinstance(found, str) else ""
        if kind == "approve":
            return "approve", None, ""
        if kind in ("reject", "respond"):
            return "reject", None, message
        if kind == "edit":
            action = value.get("edited_action")
            args = action.get("args") if isinstance(action, dict) else None
            if isinstance(args, dict):
                return "edit", dict(args), ""
    raise InvalidArgumentError(f"the answer {value!r} is not a decision on the held memory write; use {_SHAPE}")


def resolve_approval(session: Session, pending_id: str, value: Any) -> str:
    """Apply the human's answer to held write ``pending_id``; returns the JSON tool result for the model.

    Never raises: a malformed answer, an unknown or already decided id, or a write that cannot apply gives an
    error result saying so (and what happened to the write)."""
    try:
        kind, edited, message = parse_decision(value)
    except IronMemError as exc:
        return json.dumps({"success": False, "saved": False, "pending_id": pending_id,
                           "error": f"{exc}. The write stays pending; review it with `ironmem review`"},
                          ensure_ascii=False)
    try:
        if kind == "reject":
            session.reject(pending_id, note=message or "rejected by the reviewer")
            note = f" The reviewer said: {message}" if message else ""
            return json.dumps({"success": True, "saved": False, "rejected": True, "pending_id": pending_id,
                               "message": "The user rejected this memory write; it was not saved. Do not retry "
                                          f"it.{note}"}, ensure_ascii=False)
        done = session.approve(pending_id, edited=edited)
    except OperationError as exc:
        return json.dumps({"success": False, "saved": False, "pending_id": pending_id,
                           "error": f"{exc}. The write stays pending (ironmem review)"}, ensure_ascii=False)
    except IronMemError as exc:
        return json.dumps({"success": False, "saved": False, "pending_id": pending_id, "error": str(exc)},
                          ensure_ascii=False)
    return json.dumps({"success": True, "saved": True, "approved": True, "edited": edited is not None,
                       "pending_id": pending_id, "usage": done.note}, ensure_ascii=False)
