"""``IronMemory``: ironmem as a LlamaIndex chat memory (``memory=`` of agents and chat engines).

What the model sees from ``get()``/``aget()``:

1. ONE system message: the session's frozen snapshot, byte-identical on every call of the session (rule 3),
   then whatever system content the history memory adds (a stock ``Memory``'s memory blocks);
2. the chat history, kept by a stock ``llama_index.core.memory.Memory`` (its SQL store can live in a file);
3. the fenced recall (rule 2) placed before a COPY of the user message it was computed for. The copy is
   never stored. With the default ``recall_policy="replay"`` every earlier user message gets back the exact
   fence it had in its own turn, so each request extends the previous one and the provider's prefix cache
   keeps hitting; ``"ephemeral"`` shows only the current turn's fence.

All of it within ``token_limit`` (the oldest whole turns are left out first; the snapshot and the current turn
never are).

Recall is computed once per user message, however often the agent calls ``get`` (``FunctionAgent`` calls it
after every tool round): it is keyed by the message's position in the full history and a hash of its text.
A turn is synced to the providers when an assistant message without tool calls arrives through
``put``/``aput``/``put_messages``/``aput_messages``/``set``/``aset`` (for ``ReActAgent``: its final answer).

Workflows copy and serialize ``memory``: deep copies share this memory, ``to_dict()``/``from_dict()`` in the
same process reattach to it, and in a new process the memory is rebuilt from its home folder, session id and
history store, and the session keeps its frozen snapshot bytes (see :mod:`._registry`). ``from_defaults`` on
a session id whose history is in a SQL database resumes it the same way, from the log kept beside the history
(see :mod:`._resume`); a history with messages but no log starts a new snapshot and warns.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from llama_index.core.async_utils import asyncio_run
from llama_index.core.base.llms.types import CacheControl, CachePoint, ChatMessage, MessageRole, TextBlock
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.tools import FunctionTool
from llama_index.core.utils import get_tokenizer
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from ...core.errors import ArgumentTypeError, ClosedError, InvalidArgumentError
from ...core.manager import MemoryManager
from ...core.recall import FenceHistory, RecallPolicy, check_policy
from ...core.session import Session
from . import _registry
from ._messages import (
    answer_text,
    has_tool_calls,
    is_final_answer,
    message_key,
    role_of,
    strip_fence,
    text_of,
    tool_results,
    with_fence,
)
from ._resume import Resumed, ResumeLog

__all__ = ["IronMemory", "RecallPolicy"]

log = logging.getLogger("ironmem")


_IN_MEMORY_URIS = {None, "", "sqlite+aiosqlite:///:memory:", "sqlite+aiosqlite://"}
#: Memory.from_defaults arguments that can be written into a serialized IronMemory and used to rebuild it.
_PORTABLE_HISTORY_KEYS = (
    "session_id",
    "table_name",
    "async_database_uri",
    "db_schema",
    "token_limit",
    "chat_history_token_ratio",
    "token_flush_size",
)


class _State:
    """The live part of an IronMemory, shared by all its copies in this process."""

    def __init__(
        self,
        manager: MemoryManager,
        session: Session,
        history: BaseMemory,
        *,
        owns_manager: bool,
        owns_history: bool = True,
        recall_policy: str = "replay",
        recalls: dict[str, str] | None = None,
        resume_log: ResumeLog | None = None,
    ) -> None:
        self.manager = manager
        self.session = session
        self.history = history
        self.owns_manager = owns_manager
        self.owns_history = owns_history
        self.lock = threading.RLock()
        _watch_compaction(history, self)
        self.fences = FenceHistory(recall_policy, recalls)  # user-message key -> recall (rule 2, in the core)
        self.synced: set[str] = set()  # user-message keys whose turn was synced
        self.trimmed: set[str] = set()  # user-message keys whose turn the token limit left out of the requests
        self.resume_log = resume_log  # where the snapshot and fences are kept for a restart (None: nowhere)
        self.closed = False

    def __deepcopy__(self, memo: dict[int, Any]) -> _State:
        return self  # a live handle: copies share it

    def __reduce__(self) -> Any:
        raise ArgumentTypeError("the live state of an IronMemory cannot be pickled; pickle the IronMemory itself")

    def history_is_ephemeral(self) -> bool:
        """True when the chat history lives only in this process (in-memory SQLite or a non-SQL memory)."""
        store = getattr(self.history, "sql_store", None)
        if store is None:
            return True
        return getattr(store, "async_database_uri", None) in _IN_MEMORY_URIS


class _CompactionWatcher(BaseMemoryBlock[str]):
    """A memory block that only listens: a stock ``Memory`` hands it the messages it flushes out of the short-term
    history, and they go to ``Session.pre_compress`` (the provider's ``on_pre_compress``). It adds no text."""

    name: str = "ironmem_pre_compress"
    priority: int = 0
    _state: Any = PrivateAttr(default=None)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        return ""

    async def _aput(self, messages: list[ChatMessage]) -> None:
        state = self._state
        if state is None or state.closed or not messages:
            return
        flushed = [{"role": str(getattr(m.role, "value", m.role)), "content": m.content or ""} for m in messages]
        await asyncio.to_thread(state.session.pre_compress, flushed)


def _watch_compaction(history: BaseMemory, state: _State) -> None:
    """Let ``history`` (a stock ``Memory``) report what it flushes; other memories have no such step."""
    if not isinstance(history, Memory):
        return
    if any(isinstance(block, _CompactionWatcher) for block in history.memory_blocks):
        return
    watcher = _CompactionWatcher()
    watcher._state = state
    history.memory_blocks.append(watcher)


def _check_token_limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"token_limit must be a positive number of tokens, got {value!r}")
    return value


def _check_owner(session_id: str, owner: str | None, user_id: str | None) -> None:
    from .._owner import check_owner

    check_owner(session_id, owner, user_id, kind="session")


def _start_fresh(state: _State) -> None:
    """A session with nothing saved to resume from: record its start beside the history, and say loudly when
    the history already holds a conversation (its earlier requests were sent with a snapshot and fences that
    were not kept, so the next request cannot extend them: the provider's prefix cache misses once)."""
    session = state.session
    if state.resume_log is not None:
        asyncio_run(state.resume_log.astarted(session.user_id, session.snapshot.to_dict()))
    try:
        earlier = state.history.get_all()
    except Exception:  # a history that cannot be read here is the caller's to report
        earlier = []
    if earlier:
        message = (
            f"IronMemory session {session.id!r}: the chat history holds {len(earlier)} earlier messages but no "
            "saved snapshot or fences, so this conversation continues with a NEW snapshot and without its earlier "
            "fences (the first request will not reuse the provider's prompt cache). Keep the history in a SQL "
            "Memory (history_path=... or async_database_uri=...) so that IronMemory can resume it exactly."
        )
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _portable_history_config(history: BaseMemory, given: dict[str, Any]) -> dict[str, Any]:
    config = {
        k: v for k, v in given.items() if k in _PORTABLE_HISTORY_KEYS and isinstance(v, (str, int, float))
    }
    if isinstance(history, Memory):
        config["session_id"] = history.session_id
        config.setdefault("token_limit", history.token_limit)
        store = history.sql_store
        for attr in ("table_name", "async_database_uri", "db_schema"):
            value = getattr(store, attr, None)
            if isinstance(value, str):
                config[attr] = value
    return config


class IronMemory(BaseMemory):
    """ironmem as a LlamaIndex memory: frozen snapshot, fenced recall, turn syncing, stock chat history.

    Build it with :meth:`from_defaults` and pass it as ``memory=`` to an agent or a chat engine.

    Example:
        >>> import tempfile
        >>> from llama_index.core.llms import ChatMessage
        >>> from ironmem import MemoryManager
        >>> manager = MemoryManager(home=tempfile.mkdtemp())
        >>> memory = IronMemory.from_defaults(manager=manager, session_id="s1")
        >>> memory.put(ChatMessage(role="user", content="Hi, I'm Ada."))
        >>> [m.role.value for m in memory.get()]
        ['system', 'user']
        >>> memory.get()[0].content == memory.session.system_prompt_block()
        True
        >>> memory.close(); manager.close()
    """

    memory_id: str = Field(default="", description="Handle of the live memory in this process.")
    session_id: str = Field(default="", description="The ironmem session (conversation) id.")
    user_id: str | None = Field(default=None, description="Whose memory this is (scopes turn search).")
    home: str | None = Field(default=None, description="The memory home folder, used to rebuild elsewhere.")
    recall_policy: RecallPolicy = Field(default="replay", description="'replay' or 'ephemeral' old fences.")
    history_config: dict[str, Any] = Field(
        default_factory=dict, description="How to reopen the chat history."
    )
    history_messages: list[dict[str, Any]] | None = Field(
        default=None,
        description="Chat history carried inside the serialized form when its store is in memory.",
    )
    snapshot_state: dict[str, Any] | None = Field(
        default=None,
        description="The frozen snapshot (Snapshot.to_dict()), so a rebuilt session keeps its bytes.",
    )
    recall_log: dict[str, str] = Field(default_factory=dict, description="Recalled text per user message.")
    token_limit: int | None = Field(
        default=None,
        description="Most tokens get() returns, snapshot + fences + history (None: the history Memory's limit).",
    )
    cache_points: bool = Field(
        default=False, description="Add CachePoint blocks after the snapshot and the newest message."
    )
    synced_turns: list[str] = Field(default_factory=list, description="User messages whose turn was synced.")

    _state: Any = PrivateAttr(default=None)

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def class_name(cls) -> str:
        return "IronMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        manager: MemoryManager | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        history: BaseMemory | dict[str, Any] | None = None,
        *,
        session: Session | None = None,
        home: str | Path | None = None,
        history_path: str | Path | None = None,
        recall_policy: RecallPolicy = "replay",
        token_limit: int | None = None,
        cache_points: bool = False,
        recall: RecallPolicy | None = None,
        **history_kwargs: Any,
    ) -> IronMemory:
        """Create a memory for one conversation, or resume one.

        Args:
            manager: the :class:`MemoryManager` (its providers and home). Omit it to open one at ``home``
                (or ``$IRONMEM_HOME``); that manager is then closed by :meth:`close`.
            session_id: the conversation id (a new one when omitted). Reusing an id continues its history
                when the history store is persistent, with the snapshot and fences it was started with. An id
                started by another user is refused (:class:`~ironmem.core.errors.SessionOwnerError`).
            user_id: whose memory this is.
            history: a ``llama_index.core.memory.Memory`` (or any ``BaseMemory``) to keep the chat history,
                or a dict of ``Memory.from_defaults`` arguments. Default: a stock ``Memory``.
            session: an already started :class:`Session` (instead of ``manager``/``session_id``/``user_id``).
            history_path: keep the chat history in this SQLite file (shortcut for
                ``async_database_uri="sqlite+aiosqlite:///<path>"``).
            recall_policy: ``"replay"`` (default) re-sends every earlier turn's fence unchanged, which keeps
                the prompt a pure extension of the previous one; ``"ephemeral"`` sends only the current one.
                The same setting has the same name in the LangChain adapter.
            token_limit: the most tokens :meth:`get` returns, snapshot, fences and history together (counted
                with the history's tokenizer). The oldest turns are left out first; the snapshot and the current
                turn never are. Default: the history ``Memory``'s own ``token_limit``. A ``Memory`` built here
                gets the same limit.
            cache_points: add LlamaIndex ``CachePoint`` blocks after the snapshot and after the newest message
                (2 of Anthropic's 4 cache breakpoints; see docs/llama-index.md). Only for LLMs that accept
                ``CachePoint`` blocks (Anthropic, Bedrock Converse).
            recall: deprecated name of ``recall_policy`` (warns).
            **history_kwargs: more ``Memory.from_defaults`` arguments (``table_name``, ``async_database_uri``,
                ``chat_history_token_ratio``, ...).
        """
        if recall is not None:
            warnings.warn(
                "IronMemory.from_defaults(recall=...) is deprecated: use recall_policy=...",
                DeprecationWarning, stacklevel=2,
            )
            recall_policy = recall
        check_policy(recall_policy, "recall_policy")
        token_limit = _check_token_limit(token_limit)
        if token_limit is not None and not isinstance(history, BaseMemory):
            history_kwargs.setdefault("token_limit", token_limit)
        owns_manager = False
        resumed: Resumed | None = None
        if session is not None:
            if not isinstance(session, Session):
                raise ArgumentTypeError(f"session must be an ironmem Session, got {type(session).__name__}")
            manager = session.manager
            history_obj, config = _build_history(session.id, history, history_path, history_kwargs)
            resume_log = ResumeLog.beside(history_obj, session.id)
            saved = asyncio_run(resume_log.aload()) if resume_log is not None else None
            if saved is not None:
                _check_owner(session.id, saved.user_id, session.user_id)
            _registry.claim(str(manager.home), session.id, session.user_id)
        else:
            if manager is None:
                manager = MemoryManager(home=home)
                owns_manager = True
            elif not isinstance(manager, MemoryManager):
                raise ArgumentTypeError(
                    f"manager must be an ironmem MemoryManager, got {type(manager).__name__}; "
                    "build one with MemoryManager(home=...)"
                )
            sid = session_id or uuid.uuid4().hex
            history_obj, config = _build_history(sid, history, history_path, history_kwargs)
            resume_log = ResumeLog.beside(history_obj, sid)
            resumed = asyncio_run(resume_log.aload()) if resume_log is not None else None
            if resumed is not None:  # the session's owner is the one saved with it, in any process
                _check_owner(sid, resumed.user_id, user_id)
                user_id = resumed.user_id
                _registry.claim(str(manager.home), sid, user_id)
            else:
                user_id = _registry.claim(str(manager.home), sid, user_id)
            session = manager.start_session(sid, user_id, snapshot=resumed.snapshot if resumed else None)
            if resumed is not None:
                session.restore_shown(resumed.recalls.values())
        state = _State(
            manager, session, history_obj, owns_manager=owns_manager, owns_history=history_obj is not history,
            recall_policy=recall_policy, recalls=resumed.recalls if resumed else None, resume_log=resume_log,
        )
        if resumed is not None:
            state.synced.update(resumed.synced)
        else:
            _start_fresh(state)
        handle = _registry.new_handle()
        _registry.register(handle, state)
        return cls(
            memory_id=handle,
            session_id=session.id,
            user_id=session.user_id,
            home=str(manager.home),
            recall_policy=recall_policy,
            token_limit=token_limit,
            cache_points=cache_points,
            history_config=config,
        )

    def model_post_init(self, __context: Any) -> None:
        """Attach to the live state: the registered one for ``memory_id``, or one rebuilt from the fields."""
        state = _registry.lookup(self.memory_id) if self.memory_id else None
        if state is None:
            state = self._rebuild()
        self._state = state

    def _rebuild(self) -> _State:
        """Reopen this memory from its serialized fields (a new process, or a handle that was closed)."""
        if not self.home:
            raise InvalidArgumentError(
                "cannot rebuild IronMemory: its 'home' (memory folder) is unknown. Create it with "
                "IronMemory.from_defaults(manager=..., session_id=...) or pass home=..."
            )
        manager = MemoryManager(home=self.home)
        config = dict(self.history_config)
        chat_history = None
        if self.history_messages:
            chat_history = [ChatMessage.model_validate(m) for m in self.history_messages]
        elif config.get("async_database_uri") in _IN_MEMORY_URIS:
            log.warning(
                "IronMemory %s rebuilt without its chat history (it was kept in memory); "
                "pass history_path=... to keep the history in a file",
                self.session_id,
            )
        sid = self.session_id or uuid.uuid4().hex
        config.setdefault("session_id", sid)
        history = Memory.from_defaults(chat_history=chat_history, **config)
        resume_log = ResumeLog.beside(history, sid)
        # The log beside a persistent history is newer than the serialized fields; else the fields are all there is.
        resumed = asyncio_run(resume_log.aload()) if resume_log is not None else None
        if resumed is None and self.snapshot_state is not None:
            resumed = Resumed(self.user_id, self.snapshot_state, dict(self.recall_log), set(self.synced_turns))
        if resumed is not None:
            _check_owner(sid, resumed.user_id, self.user_id)
        _registry.claim(str(manager.home), sid, self.user_id)
        session = manager.start_session(sid, self.user_id, snapshot=resumed.snapshot if resumed else None)
        if resumed is not None:
            session.restore_shown(resumed.recalls.values())
        state = _State(manager, session, history, owns_manager=True, recall_policy=self.recall_policy,
                       recalls=resumed.recalls if resumed else None, resume_log=resume_log)
        if resumed is not None:
            state.synced.update(resumed.synced)
        else:
            _start_fresh(state)
        handle = self.memory_id or _registry.new_handle()
        _registry.register(handle, state)
        self.memory_id = handle
        self.session_id = session.id
        return state

    # -- copies and serialization ---------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> IronMemory:
        """A deep copy is the same memory (workflows deep-copy state in ``edit_state``)."""
        return self

    def __getstate__(self) -> dict[str, Any]:
        state = BaseModel.__getstate__(
            self
        )  # BaseComponent's version would try (and log) pickling the live state
        private = state.get("__pydantic_private__")
        if private:
            state["__pydantic_private__"] = {k: v for k, v in private.items() if k != "_state"}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if getattr(self, "_state", None) is None:
            self.model_post_init(None)

    @model_serializer(mode="wrap")
    def custom_model_dump(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data = handler(self)
        data["class_name"] = self.class_name()
        state: _State | None = self._state
        if state is not None:
            data["snapshot_state"] = state.session.snapshot.to_dict()
            with state.lock:
                data["recall_log"] = state.fences.to_dict()
                data["synced_turns"] = sorted(state.synced)
            if state.history_is_ephemeral():
                try:
                    data["history_messages"] = [m.model_dump(mode="json") for m in state.history.get_all()]
                except Exception as exc:  # serialization must not break the workflow
                    log.warning("IronMemory: chat history not included in the serialized form: %s", exc)
        return data

    # -- the live objects -----------------------------------------------------------------------
    @property
    def state(self) -> _State:
        state = self._state
        if state is None or state.closed:
            raise ClosedError(
                "this IronMemory is closed; create a new one with IronMemory.from_defaults(...)"
            )
        return state

    @property
    def session(self) -> Session:
        """The ironmem session behind this memory."""
        return self.state.session

    @property
    def manager(self) -> MemoryManager:
        return self.state.manager

    @property
    def history(self) -> BaseMemory:
        """The stock LlamaIndex memory holding the chat history (no snapshot, no fences)."""
        return self.state.history

    @property
    def snapshot(self) -> str:
        """The frozen snapshot text sent as the first system message."""
        return self.state.session.system_prompt_block()

    def tools(self, approval: str = "queue") -> list[FunctionTool]:
        """The memory tools of this session as LlamaIndex ``FunctionTool`` objects (core schemas).
        ``approval="interrupt"``: a held write asks the human in the workflow (see ``IronMemoryToolSpec``)."""
        from .tools import IronMemoryToolSpec

        return IronMemoryToolSpec(self.state.session, approval=approval).to_tool_list()  # type: ignore[arg-type]

    def close(self) -> None:
        """End the session (drains queued syncs) and release the handle.

        Also closes what this memory opened itself: the manager (when built from ``home``) and the chat
        history's database connections (a history you passed in stays open).
        """
        state = self._release()
        if state is None:
            return
        try:
            asyncio_run(_dispose(state))
        except Exception as exc:  # closing must not raise over a connection already gone
            log.debug("IronMemory: disposing the history engine failed: %s", exc)

    async def aclose(self) -> None:
        """:meth:`close` for async code (waiting for queued syncs happens off the event loop)."""
        state = await asyncio.to_thread(self._release)
        if state is None:
            return
        try:
            await _dispose(state)
        except Exception as exc:
            log.debug("IronMemory: disposing the history engine failed: %s", exc)

    def _release(self) -> _State | None:
        state = self._state
        if state is None or state.closed:
            return None
        state.closed = True
        state.session.end()
        _registry.unregister(self.memory_id)
        _registry.release(str(state.manager.home), state.session.id)
        if state.owns_manager:
            state.manager.close()
        return state

    # -- reading --------------------------------------------------------------------------------
    def get(self, input: str | ChatMessage | None = None, **kwargs: Any) -> list[ChatMessage]:
        """Snapshot, then the history with fenced recall before a copy of the user message(s), within
        :attr:`token_limit`."""
        state = self.state
        messages = state.history.get(input=cast(Any, input), **kwargs)  # the stock memory passes it through
        everything = state.history.get_all()
        current = self._current(everything, input)
        if current is not None and current[0] not in state.fences:
            text = self._recall(current[0], current[1])
            if state.resume_log is not None:
                asyncio_run(state.resume_log.arecalled(current[0], text))
        out, gone = self._compose(messages, everything, current)
        if gone:
            state.session.pre_compress(gone)
        return out

    async def aget(self, input: str | ChatMessage | None = None, **kwargs: Any) -> list[ChatMessage]:
        state = self.state
        messages = await state.history.aget(input=cast(Any, input), **kwargs)
        everything = await state.history.aget_all()
        current = self._current(everything, input)
        if current is not None and current[0] not in state.fences:
            text = await asyncio.to_thread(self._recall, current[0], current[1])
            if state.resume_log is not None:
                await state.resume_log.arecalled(current[0], text)
        out, gone = self._compose(messages, everything, current)
        if gone:
            await asyncio.to_thread(state.session.pre_compress, gone)
        return out

    def get_all(self, **kwargs: Any) -> list[ChatMessage]:
        """The stored chat history: exactly what was put, no snapshot, no fences."""
        return self.state.history.get_all(**kwargs)

    async def aget_all(self, **kwargs: Any) -> list[ChatMessage]:
        return await self.state.history.aget_all(**kwargs)

    def _current(
        self, everything: Sequence[ChatMessage], input: str | ChatMessage | None
    ) -> tuple[str, str, bool] | None:
        """The user message this request answers: (key, text, pending).

        ``pending`` means the engine passed the message as ``input`` before storing it
        (``CondensePlusContextChatEngine``): it will be stored next, at position ``len(everything)``.
        """
        input_text = text_of(input).strip() if input is not None else ""
        last = everything[-1] if everything else None
        if input_text and (
            last is None or (role_of(last) in ("assistant", "system") and not has_tool_calls(last))
        ):
            text = text_of(input)
            return message_key(len(everything), text), text, True
        for position in range(len(everything) - 1, -1, -1):
            if role_of(everything[position]) == "user":
                text = text_of(everything[position])
                return message_key(position, text), text, False
        return None

    def _recall(self, key: str, text: str) -> str:
        """Prefetch once per user message; later calls reuse it (the core's :class:`FenceHistory`)."""
        state = self.state
        return state.fences.recall_once(state.session, key, text)

    def _compose(
        self,
        messages: Sequence[ChatMessage],
        everything: Sequence[ChatMessage],
        current: tuple[str, str, bool] | None,
    ) -> tuple[list[ChatMessage], list[dict[str, Any]]]:
        """What the model gets, and the messages the token limit newly left out (for ``pre_compress``)."""
        state = self.state
        for name, text in tool_results(messages):  # custody: tool output in the context taints the turn
            state.session.observe(text, origin="tool", source=name)
        # ONE system message: the snapshot first (the stable prefix), then whatever system content the history
        # memory adds (a stock Memory puts its memory blocks there).
        system_blocks: list[Any] = [TextBlock(text=state.session.system_prompt_block())]
        if self.cache_points:
            system_blocks.append(CachePoint(cache_control=CacheControl(type="ephemeral")))
        if messages and role_of(messages[0]) == "system":
            system_blocks.extend(messages[0].model_copy(deep=True).blocks)
            messages = messages[1:]
        # The history a memory returns may be a suffix of everything (old messages archived) and may hold
        # extra messages (memory blocks): pair user messages from the end.
        stored_users = [i for i, m in enumerate(everything) if role_of(m) == "user"]
        shown_users = [j for j, m in enumerate(messages) if role_of(m) == "user"]
        position_of = dict(zip(reversed(shown_users), reversed(stored_users), strict=False))
        current_key = current[0] if current else None
        fences = state.fences
        body: list[tuple[str | None, ChatMessage]] = []  # (user-message key, message) in request order
        for j, message in enumerate(messages):
            position = position_of.get(j)
            key = None
            if position is not None:
                key = message_key(position, text_of(everything[position]))
                fenced = fences.fenced_for(key, current_key)
                if fenced:
                    message = with_fence(message, fenced)
            body.append((key, message))
        if current is not None and current[2]:
            fenced = fences.fenced_for(current[0], current_key)
            if fenced:
                body.append((current[0], ChatMessage(role=MessageRole.USER, content=fenced)))
        system = ChatMessage(role=MessageRole.SYSTEM, blocks=system_blocks)
        body, gone = self._fit(system, body)
        out = [system, *(message for _, message in body)]
        if self.cache_points and len(out) > 1:
            last = out[-1].model_copy(deep=True)
            last.blocks = [*last.blocks, CachePoint(cache_control=CacheControl(type="ephemeral"))]
            out[-1] = last
        return out, gone

    def _limit(self) -> int | None:
        if self.token_limit is not None:
            return self.token_limit
        history = self.state.history
        return history.token_limit if isinstance(history, Memory) else None

    def _counter(self) -> Callable[[str], int]:
        history = self.state.history
        tokenizer = history.tokenizer_fn if isinstance(history, Memory) else get_tokenizer()
        return lambda text: len(tokenizer(text)) if text else 0

    def _fit(
        self, system: ChatMessage, body: list[tuple[str | None, ChatMessage]]
    ) -> tuple[list[tuple[str | None, ChatMessage]], list[dict[str, Any]]]:
        """Leave out the oldest whole turns (a user message and what follows it) until the request fits the
        token limit. The snapshot and the newest turn always stay, as a stock Memory keeps its priority-0 blocks
        and its newest message. Returns the kept body and the messages left out for the first time."""
        limit = self._limit()
        if limit is None:
            return body, []
        count = self._counter()

        def size(message: ChatMessage) -> int:
            tokens = count(text_of(message))
            if message.additional_kwargs:
                tokens += count(str(message.additional_kwargs))
            return tokens

        sizes = [size(message) for _, message in body]
        total = size(system) + sum(sizes)
        starts = [i for i, (key, _) in enumerate(body) if key is not None and i > 0]  # where a later turn begins
        cut = 0
        for start in starts:
            if total <= limit:
                break
            total -= sum(sizes[cut:start])
            cut = start
        dropped, kept = body[:cut], body[cut:]
        if not dropped:
            return body, []
        state = self.state
        with state.lock:
            first_time = not state.trimmed
            fresh = {key for key, _ in dropped if key is not None and key not in state.trimmed}
            state.trimmed.update(fresh)
        gone: list[dict[str, Any]] = []
        turn: str | None = None
        for key, message in dropped:  # each message once: those of the turns left out just now
            turn = key if key is not None else turn
            if (turn in fresh) or (turn is None and first_time):
                gone.append({"role": role_of(message), "content": text_of(message)})
        return kept, gone

    # -- writing --------------------------------------------------------------------------------
    def _clean(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Drop what this memory added on the way out (snapshot, fences, cache points) before storing."""
        snapshot = self.state.session.system_prompt_block()
        cleaned = []
        for message in messages:
            if not isinstance(message, ChatMessage):
                raise ArgumentTypeError(
                    f"IronMemory stores llama_index ChatMessage objects, got {type(message).__name__}"
                )
            if any(isinstance(block, CachePoint) for block in message.blocks):
                message = message.model_copy(deep=True)
                message.blocks = [block for block in message.blocks if not isinstance(block, CachePoint)]
            if role_of(message) == "system" and message.blocks and isinstance(message.blocks[0], TextBlock) \
                    and message.blocks[0].text == snapshot:
                continue
            stripped = strip_fence(message)
            if stripped is not None:
                cleaned.append(stripped)
        return cleaned

    def _turns_to_sync(self, everything: Sequence[ChatMessage], start: int) -> list[tuple[str, str, str]]:
        """(key, user text, answer) for each final answer from ``start`` on whose turn is not synced yet."""
        state = self.state
        out: list[tuple[str, str, str]] = []
        with state.lock:
            for position in range(max(start, 0), len(everything)):
                message = everything[position]
                if not is_final_answer(message):
                    continue
                user_position = next(
                    (i for i in range(position - 1, -1, -1) if role_of(everything[i]) == "user"), None
                )
                if user_position is None:
                    continue
                user_text = text_of(everything[user_position])
                key = message_key(user_position, user_text)
                if key in state.synced:
                    continue
                state.synced.add(key)
                out.append((key, user_text, answer_text(message)))
        return out

    def _sync(self, turns: list[tuple[str, str, str]]) -> None:
        state = self.state
        for _, user, answer in turns:
            state.session.sync_turn(user, answer)
        if turns and state.resume_log is not None:
            asyncio_run(state.resume_log.asynced([key for key, _, _ in turns]))

    async def _async_sync(self, turns: list[tuple[str, str, str]]) -> None:
        state = self.state
        for _, user, answer in turns:
            await state.session.async_turn(user, answer)
        if turns and state.resume_log is not None:
            await state.resume_log.asynced([key for key, _, _ in turns])

    def put(self, message: ChatMessage, **kwargs: Any) -> None:
        """Store a message; a final assistant answer syncs its turn."""
        self.put_messages([message], **kwargs)

    async def aput(self, message: ChatMessage, **kwargs: Any) -> None:
        await self.aput_messages([message], **kwargs)

    def put_messages(self, messages: list[ChatMessage], **kwargs: Any) -> None:
        cleaned = self._clean(messages)
        if not cleaned:
            return
        history = self.state.history
        if len(cleaned) == 1:
            history.put(cleaned[0], **kwargs)
        else:
            history.put_messages(cleaned, **kwargs)
        if any(is_final_answer(m) for m in cleaned):
            everything = history.get_all()
            self._sync(self._turns_to_sync(everything, len(everything) - len(cleaned)))

    async def aput_messages(self, messages: list[ChatMessage], **kwargs: Any) -> None:
        cleaned = self._clean(messages)
        if not cleaned:
            return
        history = self.state.history
        if len(cleaned) == 1:
            await history.aput(cleaned[0], **kwargs)
        else:
            await history.aput_messages(cleaned, **kwargs)
        if any(is_final_answer(m) for m in cleaned):
            everything = await history.aget_all()
            await self._async_sync(self._turns_to_sync(everything, len(everything) - len(cleaned)))

    def set(self, messages: list[ChatMessage], **kwargs: Any) -> None:
        """Replace the history; every finished turn in it that was not synced yet is synced."""
        cleaned = self._clean(messages)
        self.state.history.set(cleaned, **kwargs)
        self._sync(self._turns_to_sync(cleaned, 0))

    async def aset(self, messages: list[ChatMessage], **kwargs: Any) -> None:
        cleaned = self._clean(messages)
        await self.state.history.aset(cleaned, **kwargs)
        await self._async_sync(self._turns_to_sync(cleaned, 0))

    def reset(self, **kwargs: Any) -> None:
        """Clear the chat history (the memory files and the turn index are untouched)."""
        state = self.state
        state.history.reset(**kwargs)
        self._forget_turns(state)
        if state.resume_log is not None:
            asyncio_run(state.resume_log.areset())

    async def areset(self, **kwargs: Any) -> None:
        state = self.state
        await state.history.areset(**kwargs)
        self._forget_turns(state)
        if state.resume_log is not None:
            await state.resume_log.areset()

    def _forget_turns(self, state: _State) -> None:
        with state.lock:
            state.fences = FenceHistory(self.recall_policy)
            state.synced.clear()
            state.trimmed.clear()

    def __repr__(self) -> str:
        return (
            f"IronMemory(session_id={self.session_id!r}, user_id={self.user_id!r}, "
            f"memory_id={self.memory_id!r})"
        )


def _history_engine(state: _State) -> Any:
    """The SQLAlchemy engine of a history this memory created itself (None otherwise)."""
    if not state.owns_history:
        return None
    store = getattr(state.history, "sql_store", None)
    return getattr(store, "_async_engine", None) if store is not None else None


async def _dispose(state: _State) -> None:
    """Close the connections this memory opened: its history's (when it built the history) and its resume log's."""
    engine = _history_engine(state)
    if engine is not None:
        await engine.dispose()
    if state.resume_log is not None:
        await state.resume_log.aclose()


def _build_history(
    session_id: str,
    history: BaseMemory | dict[str, Any] | None,
    history_path: str | Path | None,
    history_kwargs: dict[str, Any],
) -> tuple[BaseMemory, dict[str, Any]]:
    if isinstance(history, BaseMemory):
        if history_kwargs or history_path is not None:
            raise InvalidArgumentError("pass either a ready history memory or Memory.from_defaults arguments, not both")
        if isinstance(history, IronMemory):
            raise ArgumentTypeError("history must be a plain LlamaIndex memory (e.g. Memory), not another IronMemory")
        return history, _portable_history_config(history, {})
    if history is not None and not isinstance(history, dict):
        raise ArgumentTypeError(
            "history must be a llama_index BaseMemory (e.g. Memory.from_defaults(...)) or a dict of "
            f"Memory.from_defaults arguments, got {type(history).__name__}"
        )
    kwargs = {**(history or {}), **history_kwargs}
    if history_path is not None:
        if "async_database_uri" in kwargs:
            raise InvalidArgumentError("pass history_path or async_database_uri, not both")
        path = Path(history_path).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        kwargs["async_database_uri"] = f"sqlite+aiosqlite:///{path}"
    kwargs.setdefault("session_id", session_id)
    memory = Memory.from_defaults(**kwargs)
    return memory, _portable_history_config(memory, kwargs)
