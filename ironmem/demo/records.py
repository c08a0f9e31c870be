"""What the demo observed: each request the model received, each user turn, the whole run."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..core.provider import ToolSchema
from ..core.recall import split_fence


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fence_in(text: str) -> str:
    """The fenced recall an adapter put before the user's text ("" when there is none)."""
    return split_fence(text)[0]


@dataclass
class DemoRequest:
    """One request the model received, normalized: system blocks, messages as dicts, tools (OpenAI format)."""

    number: int
    session: int
    turn: int
    at: float
    system_blocks: list[str]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply_tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def system_text(self) -> str:
        return "\n\n".join(self.system_blocks)

    @property
    def system_hash(self) -> str:
        """SHA-256 of the whole system prompt as sent (every block)."""
        return _sha(self.system_text)

    @property
    def recall_fenced(self) -> str:
        """The fence carried by the latest user message of this request ("" when none)."""
        for message in reversed(self.messages):
            if message["role"] == "user":
                return _fence_in(message["content"])
        return ""

    def to_chat_request(self) -> Any:
        from ..analysis.replay import ChatRequest

        tools = tuple(
            ToolSchema(
                t["function"]["name"],
                t["function"].get("description", ""),
                t["function"].get("parameters") or {"type": "object", "properties": {}},
            )
            for t in self.tools
        )
        return ChatRequest(tools=tools, system=tuple(self.system_blocks), messages=tuple(self.messages))

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "session": self.session,
            "turn": self.turn,
            "at": self.at,
            "system_sha256": self.system_hash,
            "messages": len(self.messages),
            "tools": [t["function"]["name"] for t in self.tools],
            "recall_fenced": self.recall_fenced,
            "reply_tool_calls": self.reply_tool_calls,
        }


@dataclass
class DemoTurn:
    """One user turn: what the user said, what memory did, what the assistant answered."""

    session: int
    turn: int
    user: str
    answer: str = ""
    requests: list[int] = field(default_factory=list)
    recall_fenced: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # name, args, result

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "turn": self.turn,
            "user": self.user,
            "answer": self.answer,
            "requests": self.requests,
            "recall_fenced": self.recall_fenced,
            "tool_calls": self.tool_calls,
        }


@dataclass
class DemoResult:
    """Everything the demo observed. ``to_dict()`` is what ``ironmem demo --json`` prints."""

    framework: str
    model: str
    home: str
    turns: list[DemoTurn]
    requests: list[DemoRequest]
    snapshots: dict[int, str]  # the memory block of each session's frozen snapshot
    token_report: Any = None
    cache: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    seconds: float = 0.0
    #: Why the token and cache figures are estimates (the tokenizer's encoding was not available), else None.
    tokens_estimated: str | None = None

    def hashes(self, session: int) -> list[str]:
        return [r.system_hash for r in self.requests if r.session == session]

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "model": self.model,
            "home": self.home,
            "turns": [t.to_dict() for t in self.turns],
            "requests": [r.to_dict() for r in self.requests],
            "system_prompt_hashes": {str(s): sorted(set(self.hashes(s))) for s in sorted(self.snapshots)},
            "snapshots": {str(k): v for k, v in self.snapshots.items()},
            "token_report": self.token_report.to_dict() if self.token_report is not None else None,
            "cache_simulation": self.cache,
            "usage": self.usage,
            "tokens_estimated": self.tokens_estimated,
            "seconds": round(self.seconds, 3),
        }


