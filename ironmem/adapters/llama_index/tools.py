"""The memory tools as a LlamaIndex ``BaseToolSpec``, carrying the core's exact JSON schemas.

LlamaIndex normally derives a tool's schema from the Python signature and uses "name(signature) + docstring"
as its description. Here every tool is a ``FunctionTool`` whose metadata returns the core
:class:`~ironmem.core.provider.ToolSchema` verbatim, so what the model receives is exactly what the provider
declared, in LlamaIndex as in every other adapter.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict
from llama_index.core.tools import FunctionTool, ToolMetadata
from llama_index.core.tools.tool_spec.base import BaseToolSpec
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent

from ...core.approval import ApprovalPolicy, approval_request, resolve_approval, staged_id
from ...core.errors import ArgumentTypeError, InvalidArgumentError
from ...core.manager import MemoryManager
from ...core.provider import ToolSchema
from ...core.session import Session
from ._messages import tool_results

__all__ = ["IronMemoryToolSpec", "SchemaToolMetadata", "memory_tools"]


def _arguments_model(schema: ToolSchema) -> type[BaseModel]:
    """A permissive pydantic model whose JSON schema IS the core schema.

    Code that reads ``metadata.fn_schema`` directly (some integrations and the ReAct formatter) gets the
    same parameters as ``get_parameters_dict()``. Arguments are not validated here: the provider validates
    and answers with a JSON error the model can act on.
    """
    parameters = copy.deepcopy(schema.parameters)

    class _Arguments(BaseModel):
        model_config = ConfigDict(extra="allow")

        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
            return copy.deepcopy(parameters)

    _Arguments.__name__ = _Arguments.__qualname__ = f"{schema.name}_arguments"
    return _Arguments


@dataclass
class SchemaToolMetadata(ToolMetadata):
    """``ToolMetadata`` that returns a fixed JSON schema instead of one generated from a pydantic model.

    Example:
        >>> params = {"type": "object", "properties": {"text": {"type": "string"}}}
        >>> meta = SchemaToolMetadata(description="Echo.", name="echo", parameters=params)
        >>> meta.to_openai_tool()["function"]["parameters"]["properties"]
        {'text': {'type': 'string'}}
    """

    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def __post_init__(self) -> None:
        if self.name and (self.fn_schema is None or self.fn_schema.__name__ == "DefaultToolFnSchema"):
            self.fn_schema = _arguments_model(ToolSchema(self.name, self.description, self.parameters))

    def get_parameters_dict(self) -> dict:
        return copy.deepcopy(self.parameters)

    @classmethod
    def from_schema(cls, schema: ToolSchema, *, return_direct: bool = False) -> SchemaToolMetadata:
        """Metadata for a core :class:`ToolSchema` (name, description and parameters copied as they are)."""
        return cls(
            description=schema.description,
            name=schema.name,
            parameters=copy.deepcopy(schema.parameters),
            return_direct=return_direct,
        )


def _session_of(session_or_manager: Session | MemoryManager | Any) -> Session:
    if isinstance(session_or_manager, Session):
        return session_or_manager
    if isinstance(session_or_manager, MemoryManager):
        return session_or_manager.start_session()
    session = getattr(session_or_manager, "session", None)  # an IronMemory
    if isinstance(session, Session):
        return session
    raise ArgumentTypeError(
        "IronMemoryToolSpec takes a Session, a MemoryManager or an IronMemory, "
        f"got {type(session_or_manager).__name__}"
    )


class IronMemoryToolSpec(BaseToolSpec):
    """The memory tools of a session (built-in ``memory`` and ``session_search``, plus the external
    provider's) as LlamaIndex ``FunctionTool`` objects with the core's exact schemas.

    Pass a :class:`Session` (tools act in that session, so writes show in its next recall), an
    :class:`~ironmem.adapters.llama_index.IronMemory` (its session), or a :class:`MemoryManager` (a new
    session is started). Tool calls never raise: errors come back as JSON the model can read.

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> spec = IronMemoryToolSpec(MemoryManager(home=tempfile.mkdtemp()).start_session("s1"))
        >>> [t.metadata.name for t in spec.to_tool_list()]
        ['memory', 'session_search']
    """

    spec_functions: list[Any] = []

    def __init__(self, session_or_manager: Session | MemoryManager | Any, *,
                 approval: ApprovalPolicy = "queue") -> None:
        #: ``"interrupt"``: a held ``memory`` write asks the human inside the workflow (an ``InputRequiredEvent``
        #: on the stream, answered with a ``HumanResponseEvent`` carrying the same ``pending_id``); the tool then
        #: needs the workflow ``Context`` (a ``FunctionAgent`` passes it). ``"queue"``: it waits for ``ironmem review``.
        self.approval: ApprovalPolicy = approval
        self.session = _session_of(session_or_manager)
        self.spec_functions = [schema.name for schema in self.session.tool_schemas()]

    def schemas(self) -> list[ToolSchema]:
        """The core schemas these tools carry."""
        return list(self.session.tool_schemas())

    def to_tool_list(  # type: ignore[override]
        self,
        spec_functions: list[Any] | None = None,
        func_to_metadata_mapping: dict[str, ToolMetadata] | None = None,
    ) -> list[FunctionTool]:
        """One ``FunctionTool`` per memory tool (optionally only those named in ``spec_functions``)."""
        wanted = set(spec_functions) if spec_functions else None
        overrides = func_to_metadata_mapping or {}
        tools = []
        for schema in self.session.tool_schemas():
            if wanted is not None and schema.name not in wanted:
                continue
            metadata = overrides.get(schema.name) or SchemaToolMetadata.from_schema(schema)
            sync_fn, async_fn = self._callables(schema.name)
            kind = _MemoryTool if schema.name == "memory" else FunctionTool
            tools.append(kind(fn=sync_fn, async_fn=async_fn, metadata=metadata))
        if wanted is not None:
            missing = wanted - {t.metadata.name for t in tools}
            if missing:
                available = ", ".join(s.name for s in self.session.tool_schemas())
                raise InvalidArgumentError(f"unknown memory tool(s) {sorted(missing)}; available: {available}")
        return tools

    def _callables(self, name: str) -> tuple[Any, Any]:
        session = self.session
        if name == "memory":
            return _memory_callables(session, self.approval == "interrupt")

        def call(**kwargs: Any) -> str:
            return session.handle_tool_call(name, kwargs)

        async def acall(**kwargs: Any) -> str:
            return await session.ahandle_tool_call(name, kwargs)

        call.__name__ = acall.__name__ = name
        return call, acall


def memory_tools(session_or_manager: Session | MemoryManager | Any) -> list[FunctionTool]:
    """Shortcut for ``IronMemoryToolSpec(session_or_manager).to_tool_list()``."""
    return IronMemoryToolSpec(session_or_manager).to_tool_list()



class _MemoryTool(FunctionTool):
    """A ``FunctionTool`` whose workflow ``Context`` is optional: a ``FunctionAgent`` passes it (the tool then sees
    the run's tool outputs and can ask the human), a direct ``tool.call(...)`` works without it."""

    def call(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault(self.ctx_param_name or "ctx", None)
        return super().call(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault(self.ctx_param_name or "ctx", None)
        return await super().acall(*args, **kwargs)


def _memory_callables(session: Session, ask: bool) -> tuple[Any, Any]:
    """The ``memory`` tool's functions. Inside a workflow, the agent's scratchpad (this run's tool calls and
    results, not yet in the memory) is observed first, so a write made after a tool's output is judged as such;
    with ``ask`` a held write asks the human (human-in-the-loop events)."""

    def memory_sync(ctx: Any = None, **kwargs: Any) -> str:
        return session.handle_tool_call("memory", kwargs)

    async def memory(ctx: Any = None, **kwargs: Any) -> str:
        if ctx is not None:
            for name, text in tool_results(await ctx.store.get("scratchpad", default=[]) or []):
                session.observe(text, origin="tool", source=name)
        # The workflow may run this code again when the answer arrives: a key from the turn and the arguments
        # makes the held write's id the same each time, so it is held once.
        digest = hashlib.sha256(json.dumps(kwargs, sort_keys=True, default=str).encode()).hexdigest()[:16]
        result = await session.ahandle_tool_call("memory", kwargs, call_id=f"{session.turn_number}:{digest}")
        pending_id = staged_id(result)
        if pending_id is None or not ask or ctx is None:
            return result
        request = approval_request(session, pending_id, kwargs)
        answer = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_id=f"ironmem-approval-{pending_id}",
            waiter_event=InputRequiredEvent(prefix=request["action_requests"][0]["description"],
                                            pending_id=pending_id, request=request),
            requirements={"pending_id": pending_id},
        )
        return resolve_approval(session, pending_id, getattr(answer, "response", None))

    for fn in (memory_sync, memory):
        fn.__annotations__ = {"ctx": Context, "kwargs": Any, "return": str}
        fn.__name__ = "memory"
    return memory_sync, memory
