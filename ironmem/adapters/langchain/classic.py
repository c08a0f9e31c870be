"""``IronClassicMemory``: ironmem as a legacy ``BaseMemory`` for ``AgentExecutor`` and classic chains.

``BaseMemory`` only lives on in ``langchain-classic`` (deprecated upstream); new code should use
:class:`~ironmem.adapters.langchain.IronMemoryMiddleware` with ``create_agent``. This adapter gives classic
chains the same three rules: the snapshot under ``snapshot_key`` (byte-identical for the session), the fenced
recall under ``memory_key`` (computed once per user input), and each finished turn synced in ``save_context``.
"""

from __future__ import annotations

import warnings
from typing import Any

try:
    from langchain_classic.base_memory import BaseMemory
    from langchain_core._api.deprecation import LangChainDeprecationWarning
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'IronClassicMemory needs langchain-classic: pip install "ironmem[langchain-classic]" '
        f"({exc.name or exc} is not installed)"
    ) from exc

from langchain_core.tools import BaseTool
from pydantic import ConfigDict, PrivateAttr

from ...core.errors import InvalidArgumentError
from ...core.manager import MemoryManager
from ...core.recall import Recall
from ...core.session import Session
from ._sessions import require_source
from .toolkit import make_memory_tool

__all__ = ["IronClassicMemory"]

#: Chain inputs that are never the user's text.
_NOT_USER_INPUT = frozenset({"stop", "intermediate_steps", "agent_scratchpad", "chat_history", "callbacks"})


class IronClassicMemory(BaseMemory):
    """Persistent memory for ``langchain_classic`` chains and ``AgentExecutor``.

    Put ``{memory_snapshot}`` in the system message and ``{memory_context}{input}`` in the human message of
    the prompt: ``memory_context`` is the fenced recall followed by a blank line, or "" when nothing was
    recalled. Give the agent the memory tools with :meth:`get_tools`.

    Args:
        source: A :class:`~ironmem.Session`, or a :class:`~ironmem.MemoryManager` (a session is started,
            with ``session_id`` / ``user_id`` when given).
        memory_key: Variable holding the fenced recall (default ``"memory_context"``).
        snapshot_key: Variable holding the frozen snapshot (default ``"memory_snapshot"``).
        input_key / output_key: Which chain input is the user's text and which output is the answer; found
            automatically when there is only one candidate (``"output"`` is preferred for outputs).

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> memory = IronClassicMemory(MemoryManager(home=tempfile.mkdtemp()))
        >>> memory.save_context({"input": "I live in Lyon"}, {"output": "Noted."})
        >>> sorted(memory.load_memory_variables({"input": "hello"}))
        ['memory_context', 'memory_snapshot']
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: Any
    memory_key: str = "memory_context"
    snapshot_key: str = "memory_snapshot"
    input_key: str | None = None
    output_key: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    separator: str = "\n\n"

    _session: Session | None = PrivateAttr(default=None)
    # (user text, recall) loaded for the turn in progress, so a second load for the same input does not
    # prefetch again (recall is computed once per user message).
    _pending: tuple[str, Recall] | None = PrivateAttr(default=None)

    def __init__(self, source: Session | MemoryManager | None = None, /, **kwargs: Any) -> None:
        if source is None:
            source = kwargs.pop("source", None)
        require_source(source, "IronClassicMemory")
        with warnings.catch_warnings():
            # The user chose the legacy adapter on purpose; BaseMemory's own deprecation notice adds nothing.
            warnings.simplefilter("ignore", LangChainDeprecationWarning)
            super().__init__(source=source, **kwargs)
        if self.memory_key == self.snapshot_key:
            raise InvalidArgumentError(f"memory_key and snapshot_key must differ (both are {self.memory_key!r})")
        if isinstance(source, Session):
            self._session = source
        else:
            self._session = source.start_session(self.session_id, user_id=self.user_id)

    # -- the session -----------------------------------------------------------------------------------
    @property
    def session(self) -> Session:
        """The current session (replaced by :meth:`clear`)."""
        assert self._session is not None
        return self._session

    def get_tools(self) -> list[BaseTool]:
        """The memory tools, bound to this memory's current session (for ``AgentExecutor(tools=...)``)."""
        return [make_memory_tool(schema, lambda _runtime, _config: self.session)
                for schema in self.session.tool_schemas()]

    # -- BaseMemory ------------------------------------------------------------------------------------
    @property
    def memory_variables(self) -> list[str]:
        return [self.memory_key, self.snapshot_key]

    def _user_text(self, inputs: dict[str, Any]) -> str:
        if self.input_key is not None:
            if self.input_key not in inputs:
                raise KeyError(f"input_key {self.input_key!r} is not among the chain inputs {sorted(inputs)}")
            return str(inputs[self.input_key])
        candidates = [k for k in inputs if k not in self.memory_variables and k not in _NOT_USER_INPUT]
        if len(candidates) != 1:
            raise InvalidArgumentError(
                f"IronClassicMemory cannot tell which input is the user's text among {sorted(candidates)}; "
                "pass input_key=... (e.g. IronClassicMemory(manager, input_key='question'))"
            )
        return str(inputs[candidates[0]])

    def _answer_text(self, outputs: dict[str, Any]) -> str:
        if self.output_key is not None:
            if self.output_key not in outputs:
                raise KeyError(f"output_key {self.output_key!r} is not among the chain outputs {sorted(outputs)}")
            return str(outputs[self.output_key])
        if "output" in outputs:
            return str(outputs["output"])
        candidates = [k for k in outputs if k != "intermediate_steps"]
        if len(candidates) != 1:
            raise InvalidArgumentError(
                f"IronClassicMemory cannot tell which output is the answer among {sorted(candidates)}; "
                "pass output_key=..."
            )
        return str(outputs[candidates[0]])

    def _variables(self, recall: Recall) -> dict[str, str]:
        fenced = recall.fenced()
        return {
            self.memory_key: f"{fenced}{self.separator}" if fenced else "",
            self.snapshot_key: self.session.system_prompt_block(),
        }

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The fenced recall for the user's text and the frozen snapshot."""
        text = self._user_text(inputs)
        if self._pending is not None and self._pending[0] == text:
            return self._variables(self._pending[1])
        recall = self.session.prefetch(text)
        self._pending = (text, recall)
        return self._variables(recall)

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        text = self._user_text(inputs)
        if self._pending is not None and self._pending[0] == text:
            return self._variables(self._pending[1])
        recall = await self.session.aprefetch(text)
        self._pending = (text, recall)
        return self._variables(recall)

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Sync the finished turn (the user's text and the answer) to memory."""
        self._pending = None
        self.session.sync_turn(self._user_text(inputs), self._answer_text(outputs))

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self._pending = None
        await self.session.async_turn(self._user_text(inputs), self._answer_text(outputs))

    def clear(self) -> None:
        """Start a new session (fresh snapshot, new conversation). Saved memory on disk is NOT deleted:
        remove entries with the ``memory`` tool or the ``ironmem`` command."""
        old = self.session
        self._pending = None
        old.end()
        self._session = old.manager.start_session(user_id=old.user_id)
