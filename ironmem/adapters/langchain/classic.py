"""``IronClassicMemory``: ironmem as a legacy ``BaseMemory`` for ``AgentExecutor`` and classic chains.

``BaseMemory`` only lives on in ``langchain-classic`` (deprecated upstream); new code should use
:class:`~ironmem.adapters.langchain.IronMemoryMiddleware` with ``create_agent``. This adapter gives classic
chains the same three rules: the snapshot under ``snapshot_key`` (byte-identical for the session), the fenced
recall under ``memory_key`` (computed once per user input), and each finished turn synced in ``save_context``;
and what a stock ``ConversationBufferMemory`` gives them: the conversation so far under ``history_key``.
"""

from __future__ import annotations

import uuid
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

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, get_buffer_string
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr

from ...core.errors import InvalidArgumentError
from ...core.manager import MemoryManager
from ...core.recall import FenceHistory, RecallPolicy, check_policy, prepend_fence, recall_text
from ...core.session import Session
from ._sessions import require_source
from .toolkit import make_memory_tool

__all__ = ["IronClassicMemory"]

#: Chain inputs that are never the user's text.
_NOT_USER_INPUT = frozenset({"stop", "intermediate_steps", "agent_scratchpad", "chat_history", "callbacks"})


class IronClassicMemory(BaseMemory):
    """Persistent memory for ``langchain_classic`` chains and ``AgentExecutor``.

    Put ``{memory_snapshot}`` in the system message, the conversation so far (``{history}``, as with a
    ``ConversationBufferMemory``) after it, and ``{memory_context}{input}`` in the human message of the prompt:
    ``memory_context`` is the fenced recall followed by a blank line, or "" when nothing was recalled. Give the
    agent the memory tools with :meth:`get_tools`.

    Args:
        source: A :class:`~ironmem.Session`, or a :class:`~ironmem.MemoryManager` (a session is started,
            with ``session_id`` / ``user_id`` when given).
        memory_key: Variable holding the fenced recall (default ``"memory_context"``).
        snapshot_key: Variable holding the frozen snapshot (default ``"memory_snapshot"``).
        history_key: Variable holding the conversation so far (default ``"history"``; ``"chat_history"`` for
            the usual ``AgentExecutor`` prompts).
        return_messages: The history as a list of messages (for a ``MessagesPlaceholder``) instead of a
            ``"Human: ...\\nAI: ..."`` string, as in ``ConversationBufferMemory``.
        chat_memory: Where the conversation is kept (default: in memory, for this object's life); any
            ``BaseChatMessageHistory``. Only the user's text and the answers are stored, never a fence.
        recall_policy: ``"replay"`` (default): each earlier user message in the history carries the exact fence
            it was sent with, so each request extends the previous one (prefix cache); ``"ephemeral"``: only
            the current turn has a fence.
        input_key / output_key: Which chain input is the user's text and which output is the answer; found
            automatically when there is only one candidate (``"output"`` is preferred for outputs).

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> memory = IronClassicMemory(MemoryManager(home=tempfile.mkdtemp()))
        >>> memory.save_context({"input": "I live in Lyon"}, {"output": "Noted."})
        >>> sorted(memory.load_memory_variables({"input": "hello"}))
        ['history', 'memory_context', 'memory_snapshot']
        >>> memory.load_memory_variables({"input": "hello"})["history"]
        'Human: I live in Lyon\\nAI: Noted.'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: Any
    memory_key: str = "memory_context"
    snapshot_key: str = "memory_snapshot"
    history_key: str = "history"
    return_messages: bool = False
    chat_memory: BaseChatMessageHistory = Field(default_factory=InMemoryChatMessageHistory)
    recall_policy: RecallPolicy = "replay"
    human_prefix: str = "Human"
    ai_prefix: str = "AI"
    input_key: str | None = None
    output_key: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    separator: str = "\n\n"

    _session: Session | None = PrivateAttr(default=None)
    # (user text, message id) of the turn in progress: a second load for the same input does not prefetch
    # again (recall is computed once per user message), and save_context stores the message under that id.
    _pending: tuple[str, str] | None = PrivateAttr(default=None)
    _fences: FenceHistory = PrivateAttr(default_factory=FenceHistory)

    def __init__(self, source: Session | MemoryManager | None = None, /, **kwargs: Any) -> None:
        if source is None:
            source = kwargs.pop("source", None)
        require_source(source, "IronClassicMemory")
        with warnings.catch_warnings():
            # The user chose the legacy adapter on purpose; BaseMemory's own deprecation notice adds nothing.
            warnings.simplefilter("ignore", LangChainDeprecationWarning)
            super().__init__(source=source, **kwargs)
        keys = (self.memory_key, self.snapshot_key, self.history_key)
        if len(set(keys)) != len(keys):
            raise InvalidArgumentError(
                f"memory_key, snapshot_key and history_key must differ (got {keys!r})")
        self._fences = FenceHistory(check_policy(self.recall_policy, "recall_policy"))
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
        return [self.memory_key, self.snapshot_key, self.history_key]

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

    def _history(self, current: str) -> str | list[BaseMessage]:
        """The conversation so far; under ``replay`` each user message with the fence it was sent with."""
        messages: list[BaseMessage] = []
        for message in self.chat_memory.messages:
            if isinstance(message, HumanMessage) and message.id:
                fenced = self._fences.fenced_for(message.id, current)
                if fenced:
                    message = message.model_copy(update={"content": prepend_fence(fenced, message.text)})
            messages.append(message)
        if self.return_messages:
            return messages
        return get_buffer_string(messages, human_prefix=self.human_prefix, ai_prefix=self.ai_prefix)

    def _variables(self, key: str) -> dict[str, Any]:
        fenced = self._fences.fenced_for(key, key)
        return {
            self.memory_key: f"{fenced}{self.separator}" if fenced else "",
            self.snapshot_key: self.session.system_prompt_block(),
            self.history_key: self._history(key),
        }

    def _turn_key(self, text: str) -> tuple[str, bool]:
        """The id of the turn in progress for ``text``, and whether its recall still has to be computed."""
        if self._pending is not None and self._pending[0] == text:
            return self._pending[1], False
        key = uuid.uuid4().hex
        self._pending = (text, key)
        return key, True

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The fenced recall for the user's text, the frozen snapshot and the conversation so far."""
        text = self._user_text(inputs)
        key, new = self._turn_key(text)
        if new:
            self._fences.record(key, recall_text(self.session.prefetch(text), self.recall_policy))
        return self._variables(key)

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        text = self._user_text(inputs)
        key, new = self._turn_key(text)
        if new:
            self._fences.record(key, recall_text(await self.session.aprefetch(text), self.recall_policy))
        return self._variables(key)

    def _finish(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> tuple[str, str]:
        """Store the finished turn in the conversation (under the id its recall was kept with)."""
        user, answer = self._user_text(inputs), self._answer_text(outputs)
        key = self._pending[1] if self._pending is not None and self._pending[0] == user else uuid.uuid4().hex
        self._pending = None
        self.chat_memory.add_messages([HumanMessage(content=user, id=key), AIMessage(content=answer)])
        return user, answer

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Add the finished turn to the conversation and sync it (the user's text and the answer) to memory."""
        self.session.sync_turn(*self._finish(inputs, outputs))

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        await self.session.async_turn(*self._finish(inputs, outputs))

    def clear(self) -> None:
        """Start a new session (fresh snapshot, new conversation: the history is cleared, as in
        ``ConversationBufferMemory``). Saved memory on disk is NOT deleted: remove entries with the ``memory``
        tool or the ``ironmem`` command."""
        old = self.session
        self._pending = None
        self.chat_memory.clear()
        self._fences = FenceHistory(self.recall_policy)
        old.end()
        self._session = old.manager.start_session(user_id=old.user_id)
