"""The plug-in contract every memory provider implements, and the tool schema it exposes."""

from __future__ import annotations

import asyncio
import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MemoryProvider", "ToolSchema", "PrefetchResult"]

#: What ``prefetch`` may return: one block of text, or a list of separate recalled items.
PrefetchResult = str | Sequence[str]


@dataclass(frozen=True)
class ToolSchema:
    """A tool a provider offers the model: a name, a description and a JSON Schema for its arguments.

    This is the single source of truth for the tool's shape; adapters send exactly this schema.

    Example:
        >>> schema = ToolSchema("echo", "Echo text back.", {"type": "object", "properties": {}})
        >>> schema.to_openai()["function"]["name"]
        'echo'
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    provider: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The tool in OpenAI's function-tool format, as sent in a chat completions request."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def to_anthropic(self) -> dict[str, Any]:
        """The tool in Anthropic's Messages API format."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": copy.deepcopy(self.parameters),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": copy.deepcopy(self.parameters)}

    def __hash__(self) -> int:  # parameters is a dict; hash on the serialized form
        return hash((self.name, self.description, json.dumps(self.parameters, sort_keys=True), self.provider))


class MemoryProvider(ABC):
    """A memory backend. The built-in provider is one; at most one external provider joins it.

    Subclasses implement the four required members; every hook has a no-op default (the optional hooks follow
    Hermes's provider contract: ``on_turn_start``, ``queue_prefetch``, ``on_pre_compress``, ``on_delegation``,
    ``on_session_switch``, ``on_memory_write``, ``on_session_end``). The manager wraps
    every call into an external provider, so an exception or a hang in a hook never reaches the agent.

    Example:
        >>> class Notes(MemoryProvider):
        ...     name = "notes"
        ...     def is_available(self): return True
        ...     def initialize(self, session_id, **ctx): pass
        ...     def tool_schemas(self): return []
        >>> Notes().prefetch("hello", session_id="s1")
        ''
    """

    #: Unique provider name, e.g. ``"mem0"``. Used in logs, status and config.
    name: str = ""

    # -- required -------------------------------------------------------------------------------
    @abstractmethod
    def is_available(self) -> bool:
        """Cheap check that the provider can work (dependencies importable, config present).

        Must not do network I/O unless the provider truly needs a network to work at all.
        """

    @abstractmethod
    def initialize(self, session_id: str, **ctx: Any) -> None:
        """Called when a session starts. ``ctx`` carries ``user_id`` and ``home`` among others."""

    @abstractmethod
    def tool_schemas(self) -> list[ToolSchema]:
        """The tools this provider offers; an external one must fit the token budget (:mod:`ironmem.core.budget`)."""

    # -- optional hooks ---------------------------------------------------------------------------
    def system_prompt_block(self) -> str:
        """Static text for the frozen system-prompt snapshot ("" for none)."""
        return ""

    def prefetch(self, query: str, *, session_id: str) -> PrefetchResult:
        """Recall what is relevant to ``query``: a text block or a list of items ("" / [] for none)."""
        return ""

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        """Persist one finished exchange. Called in the background, in order."""

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        """Run one of this provider's tools and return a JSON string result."""
        return json.dumps({"success": False, "error": f"provider {self.name!r} has no tool {name!r}"})

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        """Mirror a successful built-in memory write (``action`` add/replace/remove, ``target`` memory/user)."""

    def on_session_end(self, session_id: str) -> None:
        """The session ended; flush anything session-scoped."""

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        """A turn starts (``turn_number`` counts from 1) with the user's ``message`` (secrets masked).

        For turn counting and periodic upkeep. Runs in the background, in order with the other hooks; extra
        keyword arguments may be added later and should be ignored. (Hermes: same name and signature.)
        """

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        """After a turn: start recalling for the NEXT turn in the background, so ``prefetch`` can return a
        cached result quickly. Default: nothing. (Hermes: same name and signature.)"""

    def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        """The framework is about to compact history; ``messages`` (``{"role", "content"}`` dicts, secrets
        masked) are the ones leaving the context. Extract what matters from them now. Return text for the
        summary prompt, or "" (the default). (Hermes: same name and signature.)"""
        return ""

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "", **kwargs: Any) -> None:
        """A subagent finished ``task`` with ``result`` (observed by the parent's provider, in the background).
        (Hermes: same name and signature.)"""

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str = "",
        reset: bool = False,
        rewound: bool = False,
        **kwargs: Any,
    ) -> None:
        """The conversation continues under ``new_session_id`` (resume, branch, reset, compaction). Update any
        state cached per session id. ``reset`` means a genuinely new conversation. (Hermes: same signature.)"""

    def shutdown(self) -> None:
        """Release resources (connections, threads). Called once when the manager closes."""

    # -- async twins (default: run the sync hook in a worker thread) --------------------------------
    async def aprefetch(self, query: str, *, session_id: str) -> PrefetchResult:
        return await asyncio.to_thread(self.prefetch, query, session_id=session_id)

    async def async_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        await asyncio.to_thread(self.sync_turn, user, assistant, session_id=session_id)

    async def ahandle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        return await asyncio.to_thread(self.handle_tool_call, name, args)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"
