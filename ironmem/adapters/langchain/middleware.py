"""``IronMemoryMiddleware``: ironmem for ``langchain.agents.create_agent`` in two lines.

What it does per run (one *run* = one ``invoke`` = one user turn):

* ``before_agent`` (once per run): on the first run of a thread, freezes the session's snapshot into private
  agent state, so the system prompt stays byte-identical for the thread's whole life, even when it is
  resumed from a persistent checkpointer by another process with a new manager. Then prefetches ONCE for the
  new user message and keeps the recalled text in private state, keyed by that message's id. Prefetching
  here rather than on the first model call means exactly one recall per turn whatever happens later (tool
  rounds, model retries, fallbacks), and the result is checkpointed with the turn.
* ``wrap_model_call`` (every model call): sends the frozen snapshot as its own system content block after the
  user's system prompt, and the fenced recall before the user's text, in the request only. The checkpointed
  messages never hold a fence. With ``recall="replay"`` every earlier turn gets its exact fenced bytes back,
  so each request extends the previous one (the provider's prefix cache keeps hitting); with
  ``"ephemeral"`` only the current turn's recall is sent.
* ``after_agent`` (once per run): syncs the turn (the user's text and the final answer) to memory.
* ``tools``: the memory tools, with the core's exact JSON schemas; calls go to the thread's session.
* Custody (docs/custody.md): every ``ToolMessage`` in a model request is untrusted content in the model's
  context, so it taints the turn (``Session.observe``; tools the policy trusts do not). A ``memory`` write the
  policy holds raises a LangGraph ``interrupt`` (``approval="interrupt"``, when the graph has a checkpointer)
  carrying a ``HumanInTheLoopMiddleware``-shaped request; resume with ``Command(resume={"decisions": [{"type":
  "approve"}]})`` (or ``"edit"`` with ``edited_action``, or ``"reject"``). With ``approval="queue"`` the write
  simply waits for ``ironmem review``.
* Compaction: when messages the previous model call saw are gone (``SummarizationMiddleware`` replaced them
  with a summary, or they were trimmed), they go to ``Session.pre_compress`` first thing in the next model
  call, so the external provider's ``on_pre_compress`` can still extract from them.

Everything with a rule in it (what to recall, how to fence it, what the snapshot says, how a tool call is
checked) happens in :class:`ironmem.Session`; this module only moves text between LangChain and it.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NotRequired, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from ...core.approval import ApprovalPolicy, approval_request, resolve_approval, staged_id
from ...core.errors import SessionOwnerError
from ...core.manager import MemoryManager
from ...core.recall import FenceHistory, RecallPolicy, check_policy, prepend_fence, recall_text
from ...core.session import Session
from .._owner import check_owner
from ._sessions import SessionRegistry, thread_id_from_config, user_id_from
from .toolkit import make_memory_tool

__all__ = ["IronMemoryMiddleware", "IronMemoryState", "RecallPolicy"]

log = logging.getLogger("ironmem.langchain")



class IronMemoryState(AgentState):
    """Agent state with ironmem's private fields (checkpointed, never in the agent's input or output)."""

    #: The frozen memory block of this thread (rule 3), captured on its first run.
    ironmem_snapshot: NotRequired[Annotated[str, PrivateStateAttr]]
    #: The entries that snapshot was rendered from, so a resumed thread's live delta stays exact.
    ironmem_snapshot_entries: NotRequired[Annotated[dict[str, list[str]], PrivateStateAttr]]
    #: The user id the thread was started with (None: no user id); another user may not continue the thread.
    ironmem_user: NotRequired[Annotated[str | None, PrivateStateAttr]]
    #: Recalled text (unfenced) per user message id; the fence is rebuilt with the core's ``fence()``.
    ironmem_recalls: NotRequired[Annotated[dict[str, str], PrivateStateAttr]]
    #: Id of the user message of the current (or last) run.
    ironmem_turn: NotRequired[Annotated[str, PrivateStateAttr]]
    #: Id of the last user message whose turn was synced.
    ironmem_synced: NotRequired[Annotated[str, PrivateStateAttr]]
    #: Why this run was refused (another user on this thread); cleared by the thread's next accepted run.
    ironmem_refused: NotRequired[Annotated[str | None, PrivateStateAttr]]


def _message_key(message: BaseMessage, index: int) -> str:
    return message.id or f"#{index}"


def _as_dict(message: BaseMessage) -> dict[str, str]:
    """A LangChain message as the core's plain ``{"role", "content"}`` dict."""
    role = {"human": "user", "ai": "assistant"}.get(message.type, message.type)
    return {"role": role, "content": message.text}


def _last_user_message(messages: list[AnyMessage]) -> tuple[int, HumanMessage] | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage):
            return index, message
    return None


def _with_snapshot(system: SystemMessage | None, snapshot: str) -> SystemMessage:
    """The user's system prompt (as blocks), then the snapshot in a block of its own."""
    block: dict[str, Any] = {"type": "text", "text": snapshot}
    if system is None:
        return SystemMessage(content=[block])
    content = system.content
    blocks: list[Any]
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}] if content else []
    else:
        blocks = [{"type": "text", "text": b} if isinstance(b, str) else b for b in content]
    return system.model_copy(update={"content": [*blocks, block]})


def _with_fence(message: HumanMessage, fenced: str) -> HumanMessage:
    """A copy of ``message`` with the fenced recall before the user's text."""
    content = message.content
    if isinstance(content, str):
        new_content: Any = prepend_fence(fenced, content)
    else:
        new_content = [{"type": "text", "text": fenced}, *content]
    return message.model_copy(update={"content": new_content})


class IronMemoryMiddleware(AgentMiddleware[IronMemoryState, Any]):
    """Persistent memory for a ``create_agent`` agent: frozen snapshot, fenced recall, memory tools, turn sync.

    Args:
        manager: The :class:`~ironmem.MemoryManager` (configure its external provider first: the tools are
            taken from it when the middleware is built).
        recall_policy: ``"replay"`` (default) re-sends every earlier turn's exact fenced recall so each request
            extends the previous one (prefix cache friendly); ``"ephemeral"`` sends only the current turn's.
            The same setting has the same name in the LlamaIndex adapter.
        user_id: Default user id for new sessions. A run's ``context.user_id`` (or
            ``config["configurable"]["user_id"]``) takes precedence when given. A thread belongs to the user
            who started it: a run of that thread as another user raises
            :class:`~ironmem.core.errors.SessionOwnerError` before anything is read or written.
        recall: Deprecated name of ``recall_policy`` (warns).

    The session id is the run's thread id (``config["configurable"]["thread_id"]``); runs without one share
    a fresh id for this middleware instance. List this middleware before
    ``AnthropicPromptCachingMiddleware`` so the cache breakpoint lands on the snapshot block.

    Example:
        >>> import tempfile
        >>> from langchain.agents import create_agent
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> from ironmem import MemoryManager
        >>> from ironmem.testing.langchain import ScriptedChatModel
        >>> memory = IronMemoryMiddleware(MemoryManager(home=tempfile.mkdtemp()))
        >>> model = ScriptedChatModel(["Hello!"])
        >>> agent = create_agent(model, system_prompt="Be brief.", middleware=[memory],
        ...                      checkpointer=InMemorySaver())
        >>> agent.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t1"}})["messages"][-1].text
        'Hello!'
        >>> model.requests[0].tool_names
        ['memory', 'session_search']
        >>> "Persistent memory" in model.requests[0].messages[0].content[-1]["text"]
        True
    """

    state_schema = IronMemoryState

    def __init__(
        self,
        manager: MemoryManager,
        recall_policy: RecallPolicy = "replay",
        user_id: str | None = None,
        approval: ApprovalPolicy = "interrupt",
        *,
        recall: RecallPolicy | None = None,
    ) -> None:
        if recall is not None:
            warnings.warn(
                "IronMemoryMiddleware(recall=...) is deprecated: use recall_policy=... (the name the LlamaIndex "
                "adapter uses too)", DeprecationWarning, stacklevel=2,
            )
            recall_policy = recall
        self.recall_policy: RecallPolicy = check_policy(recall_policy, "recall_policy")
        #: What a held memory write does: ``"interrupt"`` (a LangGraph interrupt, when the graph has a
        #: checkpointer) or ``"queue"`` (it waits for ``ironmem review`` / ``Session.approve``).
        self.approval: ApprovalPolicy = approval
        self.manager = manager
        self.user_id = user_id
        self._registry = SessionRegistry(manager, user_id=user_id)
        # Recalls by session, for runs without a checkpointer (private state does not outlive such a run).
        self._recall_cache: dict[str, dict[str, str]] = {}
        # The messages each session's previous model call saw, by id: when some are gone at the next call, the
        # history was compacted (SummarizationMiddleware, trimming) and the session hears about them.
        self._seen: dict[str, dict[str, BaseMessage]] = {}
        self.tools: list[BaseTool] = [
            make_memory_tool(schema, self._tool_session) for schema in manager.tool_schemas(user_id)
        ]

    @property
    def recall(self) -> RecallPolicy:
        """Deprecated name of :attr:`recall_policy`."""
        return self.recall_policy

    # -- sessions ---------------------------------------------------------------------------------
    @staticmethod
    def _run_ids(runtime: Any) -> tuple[str | None, str | None]:
        info = getattr(runtime, "execution_info", None)
        thread_id = getattr(info, "thread_id", None)
        config: RunnableConfig | None = None
        try:
            config = get_config()
        except RuntimeError:  # called outside a runnable context
            config = None
        if not thread_id:
            thread_id = thread_id_from_config(config)
        return (str(thread_id) if thread_id else None), user_id_from(getattr(runtime, "context", None), config)

    def session_for(self, runtime: Any = None) -> Session:
        """The session of the run ``runtime`` belongs to (one per thread id, started on first use)."""
        thread_id, user_id = self._run_ids(runtime)
        return self._registry.get(thread_id, user_id)

    def _tool_session(self, runtime: Any, config: RunnableConfig | None) -> Session:
        run_config = getattr(runtime, "config", None) or config
        thread_id = thread_id_from_config(run_config)
        return self._registry.get(thread_id, user_id_from(getattr(runtime, "context", None), run_config))

    @property
    def sessions(self) -> dict[str, Session]:
        """Sessions started so far, by thread id."""
        return self._registry.sessions

    def end_session(self, thread_id: str | None = None) -> bool:
        """End the session of ``thread_id`` (drains its background syncs). The thread can continue later."""
        self._recall_cache.pop(thread_id or self._registry.default_id, None)
        self._seen.pop(thread_id or self._registry.default_id, None)
        return self._registry.end(thread_id)

    def close(self) -> None:
        """End every session this middleware started. The manager stays open (it is the caller's)."""
        self._recall_cache.clear()
        self._seen.clear()
        self._registry.end_all()

    # -- before_agent: freeze the snapshot, prefetch once for the new user message -----------------
    def _plan_turn(self, state: IronMemoryState, session: Session) -> tuple[dict[str, Any], str, str]:
        """State updates so far, plus the key and text of a user message that still needs its recall."""
        updates: dict[str, Any] = {}
        if not state.get("ironmem_snapshot"):
            saved = session.snapshot.to_dict()
            updates["ironmem_snapshot"] = saved["text"]
            updates["ironmem_snapshot_entries"] = saved["entries"]
            updates["ironmem_user"] = session.user_id
        found = _last_user_message(state.get("messages", []))
        if found is None:
            return updates, "", ""
        index, message = found
        key = _message_key(message, index)
        updates["ironmem_turn"] = key
        if key in self._history(state, session):  # already recalled (a run re-invoked without a new message)
            return updates, "", ""
        return updates, key, message.text

    def _store_recall(self, state: IronMemoryState, session: Session, updates: dict[str, Any], key: str,
                      body: str) -> dict[str, Any]:
        history = self._history(state, session)
        history.record(key, body)
        recalls = history.to_dict()
        self._recall_cache[session.id] = dict(recalls)
        updates["ironmem_recalls"] = recalls
        return updates

    def _history(self, state: IronMemoryState, session: Session) -> FenceHistory:
        """The thread's fence history (rule 2's bookkeeping lives in the core): from the checkpointed private
        state, else from this process's cache (a state schema that drops private fields)."""
        stored = state.get("ironmem_recalls")
        return FenceHistory(self.recall_policy, stored if stored is not None else self._recall_cache.get(session.id, {}))

    def _resume(self, state: IronMemoryState, runtime: Any) -> Session:
        """The thread's session; a thread restored from a checkpoint keeps the snapshot it started with, and
        the user it started with (another user is refused, even in a new process)."""
        thread_id, user_id = self._run_ids(runtime)
        text = state.get("ironmem_snapshot")
        saved = {"text": text, "entries": state.get("ironmem_snapshot_entries") or {}} if text else None
        if saved is not None and "ironmem_user" in state:
            owner = state.get("ironmem_user")
            check_owner(thread_id or self._registry.default_id, owner, user_id)
            user_id = owner
        shown = (state.get("ironmem_recalls") or {}).values()
        return self._registry.get(thread_id, user_id, snapshot=saved, shown=shown)

    @staticmethod
    def _refuse(state: IronMemoryState, error: SessionOwnerError) -> dict[str, Any]:
        """The run of another user on this thread: take its message back out of the thread (LangGraph wrote the
        input before any middleware ran), skip the model and tools, and raise in ``after_agent``."""
        updates: dict[str, Any] = {"jump_to": "end", "ironmem_refused": str(error)}
        found = _last_user_message(state.get("messages", []))
        if found is not None and found[1].id:
            updates["messages"] = [RemoveMessage(id=found[1].id)]
        return updates

    @staticmethod
    def _accepted(state: IronMemoryState, updates: dict[str, Any]) -> dict[str, Any] | None:
        if state.get("ironmem_refused"):
            updates["ironmem_refused"] = None
        return updates or None

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: IronMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        try:
            session = self._resume(state, runtime)
        except SessionOwnerError as exc:
            return self._refuse(state, exc)
        updates, key, text = self._plan_turn(state, session)
        if key:
            recall = session.prefetch(text)
            updates = self._store_recall(state, session, updates, key, recall_text(recall, self.recall_policy))
        return self._accepted(state, updates)

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: IronMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        try:
            session = self._resume(state, runtime)
        except SessionOwnerError as exc:
            return self._refuse(state, exc)
        updates, key, text = self._plan_turn(state, session)
        if key:
            recall = await session.aprefetch(text)
            updates = self._store_recall(state, session, updates, key, recall_text(recall, self.recall_policy))
        return self._accepted(state, updates)

    # -- compaction: messages that left the history since the previous model call -----------------
    def _compacted(self, session: Session, messages: list[AnyMessage]) -> list[dict[str, str]]:
        """Messages seen at this session's previous model call that are gone now, as role/content dicts."""
        current: dict[str, BaseMessage] = {m.id: m for m in messages if m.id}
        previous = self._seen.get(session.id)
        self._seen[session.id] = current
        if not previous:
            return []
        return [_as_dict(m) for mid, m in previous.items() if mid not in current]

    # -- wrap_model_call: snapshot block + fenced recall, in the request only ----------------------
    def _prepare(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        state = request.state
        session = self.session_for(request.runtime)
        snapshot = cast(str, state.get("ironmem_snapshot") or session.system_prompt_block())
        history = self._history(cast(IronMemoryState, state), session)
        current = cast(str | None, state.get("ironmem_turn"))
        messages: list[AnyMessage] = []
        for index, message in enumerate(request.messages):
            if isinstance(message, HumanMessage):
                fenced = history.fenced_for(_message_key(message, index), current)
                if fenced:
                    message = _with_fence(message, fenced)
            messages.append(message)
        return request.override(system_message=_with_snapshot(request.system_message, snapshot), messages=messages)

    @staticmethod
    def _observe_tools(session: Session, messages: list[AnyMessage]) -> None:
        """Custody: every tool result in the request is content the model reads; untrusted ones taint the turn."""
        for message in messages:
            if isinstance(message, ToolMessage):
                session.observe(message.text, origin="tool", source=message.name or "")

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        session = self.session_for(request.runtime)
        self._observe_tools(session, list(request.messages))
        gone = self._compacted(session, list(request.messages))
        if gone:
            session.pre_compress(gone)
        return handler(self._prepare(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        session = self.session_for(request.runtime)
        self._observe_tools(session, list(request.messages))
        gone = self._compacted(session, list(request.messages))
        if gone:
            await asyncio.to_thread(session.pre_compress, gone)
        return await handler(self._prepare(request))

    # -- wrap_tool_call: a held memory write asks the human (LangGraph interrupt) -------------------------
    def _review(self, request: ToolCallRequest, result: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
        if self.approval != "interrupt" or not isinstance(result, ToolMessage):
            return result
        pending_id = staged_id(result.text)
        if pending_id is None:
            return result
        try:
            config = get_config()
        except RuntimeError:
            config = {}
        if not (config.get("configurable") or {}).get("__pregel_checkpointer"):
            return result  # no checkpointer: nothing could resume an interrupt; the write waits in the queue
        session = self._tool_session(request.runtime, config)
        decision = interrupt(approval_request(session, pending_id, request.tool_call.get("args") or {}))
        answer = resolve_approval(session, pending_id, decision)
        return ToolMessage(content=answer, tool_call_id=result.tool_call_id, name=result.name)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._review(request, handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        return self._review(request, await handler(request))

    # -- after_agent: sync the turn ------------------------------------------------------------------
    @staticmethod
    def _finished_turn(state: IronMemoryState) -> tuple[str, str, str] | None:
        turn = state.get("ironmem_turn")
        if not turn or state.get("ironmem_synced") == turn:
            return None
        messages = state.get("messages", [])
        start = None
        for index, message in enumerate(messages):
            if isinstance(message, HumanMessage) and _message_key(message, index) == turn:
                start = index
        if start is None:
            return None
        answer = ""
        for message in reversed(messages[start + 1:]):  # the last thing the assistant said this turn
            if isinstance(message, AIMessage) and message.text.strip():
                answer = message.text
                break
        return turn, messages[start].text, answer

    def after_agent(self, state: IronMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if state.get("ironmem_refused"):
            raise SessionOwnerError(state["ironmem_refused"])
        finished = self._finished_turn(state)
        if finished is None:
            return None
        turn, user, assistant = finished
        self.session_for(runtime).sync_turn(user, assistant)
        return {"ironmem_synced": turn}

    async def aafter_agent(self, state: IronMemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if state.get("ironmem_refused"):
            raise SessionOwnerError(state["ironmem_refused"])
        finished = self._finished_turn(state)
        if finished is None:
            return None
        turn, user, assistant = finished
        await self.session_for(runtime).async_turn(user, assistant)
        return {"ironmem_synced": turn}
