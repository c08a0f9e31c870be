"""A scripted, tool-calling LangChain chat model for tests and demos (no network, no API key).

No fake chat model in ``langchain-core`` implements ``bind_tools``, so ``create_agent`` with tools cannot run on
them. :class:`ScriptedChatModel` plays back a script of replies (plain answers, tool calls, or callables that
look at the request), records every request it receives exactly as the model saw it (messages and the tools
bound, in OpenAI format), and works with ``invoke`` and ``ainvoke``.

Example:
    >>> from langchain_core.messages import HumanMessage
    >>> model = ScriptedChatModel(script=[
    ...     ScriptedChatModel.tool_call("memory", {"action": "add", "target": "user", "content": "Likes tea"}),
    ...     "Noted.",
    ... ])
    >>> bound = model.bind_tools([{"type": "function", "function": {"name": "memory", "parameters": {}}}])
    >>> bound.invoke([HumanMessage("I like tea")]).tool_calls[0]["name"]
    'memory'
    >>> bound.invoke([HumanMessage("thanks")]).content
    'Noted.'
    >>> [r.tool_names for r in model.requests]
    [['memory'], ['memory']]
"""

from __future__ import annotations

import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel, LanguageModelInput
    from langchain_core.messages import AIMessage, BaseMessage, messages_to_dict
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import Runnable
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'ironmem.testing.langchain needs LangChain: pip install "ironmem[langchain]"'
    ) from exc

from ..core.errors import ArgumentTypeError, ScriptExhaustedError

__all__ = ["ScriptedChatModel", "ScriptedRequest", "ScriptExhaustedError", "Step"]

#: One scripted reply: a message, plain text, or a callable that sees the request's messages and returns one.
Step = (
    AIMessage
    | str
    | Callable[[list[BaseMessage]], "AIMessage | str"]
    | Callable[[list[BaseMessage]], Awaitable["AIMessage | str"]]
)


@dataclass
class ScriptedRequest:
    """One request the model received: the messages as sent (system message included) and the tools bound."""

    messages: list[BaseMessage]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: "sync" (``_generate``) or "async" (``_agenerate``): which path the caller took.
    via: str = "sync"

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools bound to this request, in order."""
        return [t.get("function", {}).get("name", "") for t in self.tools]

    @property
    def system_text(self) -> str:
        """The text of the leading system message ("" when there is none), all blocks joined."""
        if self.messages and self.messages[0].type == "system":
            return self.messages[0].text
        return ""

    def serialized(self) -> list[dict[str, Any]]:
        """The messages as plain dicts (``messages_to_dict``), for byte-level comparisons between requests."""
        return messages_to_dict(self.messages)

    def text(self) -> str:
        """Every message's text joined by newlines (handy for ``in`` checks)."""
        return "\n".join(m.text for m in self.messages)


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script and records what it was asked.

    Args:
        script: Replies in order. Each step is an ``AIMessage`` (use :meth:`tool_call` for tool calls), a
            string (a plain answer), or a callable ``step(messages) -> AIMessage | str`` (may be async) that
            sees the messages of the request it answers, e.g. to echo what the fence contained.
        usage_metadata: Optional token usage to report on every reply: a dict (``input_tokens``,
            ``output_tokens``, ``total_tokens``, optionally ``input_token_details``) or a callable
            ``f(request) -> dict``.
        repeat_last: When the script runs out, repeat the last step instead of raising.

    Example:
        >>> model = ScriptedChatModel(script=["hello"], usage_metadata={"input_tokens": 3, "output_tokens": 1,
        ...                                                            "total_tokens": 4})
        >>> model.invoke("hi").usage_metadata["total_tokens"]
        4
    """

    script: list[Any]
    usage_metadata: dict[str, Any] | Callable[[ScriptedRequest], dict[str, Any]] | None = None
    repeat_last: bool = False

    _cursor: int = PrivateAttr(default=0)
    _requests: list[ScriptedRequest] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, script: Sequence[Step] | None = None, **kwargs: Any) -> None:
        super().__init__(script=list(script or []), **kwargs)

    # -- public helpers ----------------------------------------------------------------------------
    @staticmethod
    def tool_call(name: str, args: dict[str, Any], *, call_id: str | None = None, content: str = "") -> AIMessage:
        """A scripted reply that calls tool ``name`` with ``args``."""
        return AIMessage(
            content=content,
            tool_calls=[{"name": name, "args": dict(args), "id": call_id or f"call_{uuid.uuid4().hex[:12]}",
                         "type": "tool_call"}],
        )

    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self.requests)

    @property
    def remaining(self) -> int:
        """Script steps not played yet."""
        with self._lock:
            return max(0, len(self.script) - self._cursor)

    def reset(self, script: Sequence[Step] | None = None) -> None:
        """Forget recorded requests and rewind the script (or replace it)."""
        with self._lock:
            if script is not None:
                self.script = list(script)
            self._cursor = 0
            self._requests.clear()

    # -- LangChain contract ------------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "ironmem-scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"steps": len(self.script)}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (converted to OpenAI format, as a real provider would send them)."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _record(self, messages: list[BaseMessage], kwargs: dict[str, Any], via: str) -> tuple[ScriptedRequest, Any]:
        extra = {k: v for k, v in kwargs.items() if k not in ("tools", "tool_choice")}
        request = ScriptedRequest(
            messages=[m.model_copy(deep=True) for m in messages],
            tools=list(kwargs.get("tools") or []),
            tool_choice=kwargs.get("tool_choice"),
            kwargs=extra,
            via=via,
        )
        with self._lock:
            self._requests.append(request)
            if self._cursor < len(self.script):
                step = self.script[self._cursor]
                self._cursor += 1
            elif self.repeat_last and self.script:
                step = self.script[-1]
            else:
                raise ScriptExhaustedError(
                    f"ScriptedChatModel was called {len(self._requests)} times but its script has "
                    f"{len(self.script)} steps; add more steps (or pass repeat_last=True)"
                )
        return request, step

    def _finish(self, request: ScriptedRequest, reply: Any) -> ChatResult:
        if isinstance(reply, str):
            message = AIMessage(content=reply)
        elif isinstance(reply, AIMessage):
            message = reply.model_copy(deep=True)
        else:
            raise ArgumentTypeError(
                f"a ScriptedChatModel step must give an AIMessage or a str, got {type(reply).__name__}"
            )
        usage = self.usage_metadata(request) if callable(self.usage_metadata) else self.usage_metadata
        if usage is not None and message.usage_metadata is None:
            message.usage_metadata = dict(usage)  # type: ignore[assignment]
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request, step = self._record(messages, kwargs, "sync")
        reply = step(list(request.messages)) if callable(step) else step
        if inspect.isawaitable(reply):
            close = getattr(reply, "close", None)
            if close is not None:
                close()  # don't leave a never-awaited coroutine behind
            raise ArgumentTypeError("this script step is async; call the model with ainvoke()")
        return self._finish(request, reply)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request, step = self._record(messages, kwargs, "async")
        reply = step(list(request.messages)) if callable(step) else step
        if inspect.isawaitable(reply):
            reply = await reply
        return self._finish(request, reply)
