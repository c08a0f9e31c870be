"""The memory tools as LangChain tools, carrying the core's exact JSON schemas.

Each tool is a ``StructuredTool`` whose ``args_schema`` is the core ``ToolSchema.parameters`` dict, so
``convert_to_openai_tool(tool) == schema.to_openai()``: the model sees byte for byte what the core defines.
Arguments are not validated by LangChain (a dict schema is passed through as is); the core session checks
them and answers bad ones with a JSON error the model can read, so the agent loop goes on.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, BaseToolkit, StructuredTool
from pydantic import ConfigDict, PrivateAttr

from ...core.errors import SessionOwnerError
from ...core.manager import MemoryManager
from ...core.provider import ToolSchema
from ...core.session import Session
from ._sessions import SessionRegistry, require_source, thread_id_from_config, user_id_from

__all__ = ["IronMemoryToolkit", "make_memory_tool", "SessionResolver"]

#: Finds the session a tool call belongs to, from the injected ``ToolRuntime`` (None outside a graph)
#: and the call's ``RunnableConfig``.
SessionResolver = Callable[["ToolRuntime | None", "RunnableConfig | None"], Session]


def make_memory_tool(schema: ToolSchema, resolve: SessionResolver) -> StructuredTool:
    """One LangChain tool for a core ``ToolSchema``; calls go to ``resolve(...).handle_tool_call``.

    The function takes ``runtime: ToolRuntime`` (injected by LangGraph's ``ToolNode`` and never shown to the
    model) and the run's config, so the session can follow the thread id and user id of the run.
    The call never raises into the agent loop: a thread that belongs to another user
    (:class:`~ironmem.core.errors.SessionOwnerError`) comes back as a JSON error, with nothing read or written.
    """
    name = schema.name

    def call(runtime: ToolRuntime = None, config: RunnableConfig = None, **arguments: Any) -> str:  # type: ignore[assignment]
        try:
            session = resolve(runtime, config)
        except SessionOwnerError as exc:
            return json.dumps({"success": False, "error": str(exc)}, ensure_ascii=False)
        # the tool-call id keeps a held write's id stable when LangGraph runs the call again (resume)
        return session.handle_tool_call(name, arguments, call_id=getattr(runtime, "tool_call_id", None))

    async def acall(runtime: ToolRuntime = None, config: RunnableConfig = None, **arguments: Any) -> str:  # type: ignore[assignment]
        try:
            session = resolve(runtime, config)
        except SessionOwnerError as exc:
            return json.dumps({"success": False, "error": str(exc)}, ensure_ascii=False)
        return await session.ahandle_tool_call(name, arguments, call_id=getattr(runtime, "tool_call_id", None))

    call.__name__ = acall.__name__ = name
    return StructuredTool(
        name=name,
        description=schema.description,
        args_schema=copy.deepcopy(schema.parameters),
        func=call,
        coroutine=acall,
        metadata={"ironmem_provider": schema.provider},
    )


def _runtime_ids(runtime: Any, config: RunnableConfig | None) -> tuple[str | None, str | None]:
    """(thread id, user id) of a tool call: from the ToolRuntime when there is one, else from the config."""
    run_config = getattr(runtime, "config", None) or config
    context = getattr(runtime, "context", None)
    return thread_id_from_config(run_config), user_id_from(context, run_config)


class IronMemoryToolkit(BaseToolkit):
    """The ironmem memory tools for any LangChain agent (``create_agent``, classic ``AgentExecutor``, ...).

    Give it a :class:`~ironmem.Session` to pin every call to that session, or a
    :class:`~ironmem.MemoryManager` to get one session per thread id: inside a LangGraph run the thread id
    and user id come from the injected ``ToolRuntime`` (``config["configurable"]["thread_id"]``, and
    ``context.user_id`` or ``config["configurable"]["user_id"]``); outside one, from the config passed to
    ``invoke``; else one fresh session per toolkit.

    Example:
        >>> import json, tempfile
        >>> from ironmem import MemoryManager
        >>> toolkit = IronMemoryToolkit(MemoryManager(home=tempfile.mkdtemp()))
        >>> [t.name for t in toolkit.get_tools()]
        ['memory', 'session_search']
        >>> memory = toolkit.get_tools()[0]
        >>> json.loads(memory.invoke({"action": "add", "target": "user", "content": "Likes tea"}))["success"]
        True
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: Any
    user_id: str | None = None

    _session: Session | None = PrivateAttr(default=None)
    _registry: SessionRegistry | None = PrivateAttr(default=None)
    _tools: list[BaseTool] = PrivateAttr(default_factory=list)

    def __init__(self, session_or_manager: Session | MemoryManager | None = None, /, **kwargs: Any) -> None:
        if session_or_manager is None:
            session_or_manager = kwargs.pop("source", None)
        require_source(session_or_manager, "IronMemoryToolkit")
        super().__init__(source=session_or_manager, **kwargs)
        if isinstance(session_or_manager, Session):
            self._session = session_or_manager
            schemas = session_or_manager.tool_schemas()
        else:
            self._registry = SessionRegistry(session_or_manager, user_id=self.user_id)
            schemas = session_or_manager.tool_schemas()
        self._tools = [make_memory_tool(schema, self.session_for) for schema in schemas]

    @property
    def manager(self) -> MemoryManager:
        return self._session.manager if self._session is not None else self.source

    def session_for(self, runtime: Any = None, config: RunnableConfig | None = None) -> Session:
        """The session a tool call belongs to (the pinned one, or the thread's)."""
        if self._session is not None:
            return self._session
        assert self._registry is not None
        thread_id, user_id = _runtime_ids(runtime, config)
        return self._registry.get(thread_id, user_id)

    def get_tools(self) -> list[BaseTool]:
        """The memory tools: the built-in ``memory`` and ``session_search``, then the external provider's."""
        return list(self._tools)

    def end(self) -> None:
        """End the sessions this toolkit started (a pinned session is left to its owner)."""
        if self._registry is not None:
            self._registry.end_all()
