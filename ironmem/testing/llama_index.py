"""A scripted function-calling LLM for LlamaIndex, so agent loops run offline and deterministically.

``llama_index.core.llms.MockLLM`` is not a function-calling model, so ``FunctionAgent`` refuses it, and the
mock function-calling LLM is not present in every 0.14.x release. :class:`ScriptedFunctionCallingLLM` plays
back a script of tool calls and answers, and records every request (the messages and the tools exactly as
an OpenAI-style integration would send them). It works on every llama-index-core 0.14.x.

Example:
    >>> from llama_index.core.llms import ChatMessage
    >>> save = tool_call("memory", {"action": "add", "target": "user", "content": "Ada"})
    >>> llm = ScriptedFunctionCallingLLM([save, "Saved."])
    >>> response = llm.chat([ChatMessage(role="user", content="remember me")])
    >>> [c.tool_name for c in llm.get_tool_calls_from_response(response)]
    ['memory']
    >>> llm.chat([ChatMessage(role="user", content="thanks")]).message.content
    'Saved.'
    >>> len(llm.requests)
    2
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

try:  # ToolCallBlock arrived during 0.14.x; older releases carry tool calls in additional_kwargs only.
    from llama_index.core.base.llms.types import ToolCallBlock as _ToolCallBlock
except ImportError:  # pragma: no cover - depends on the installed llama-index-core
    _ToolCallBlock = None  # type: ignore[assignment,misc]

from ..core.errors import ArgumentTypeError, InvalidArgumentError, ScriptExhaustedError

__all__ = [
    "ScriptedFunctionCallingLLM",
    "ScriptedToolCall",
    "ScriptedRequest",
    "tool_call",
    "ScriptExhaustedError",
]


@dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call the scripted model makes. Build it with :func:`tool_call`."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str = ""


def tool_call(
    name: str, args: dict[str, Any] | None = None, *, call_id: str | None = None
) -> ScriptedToolCall:
    """A scripted tool call, e.g. ``tool_call("session_search", {"query": "passport"})``."""
    return ScriptedToolCall(name, dict(args or {}), call_id or f"call_{uuid.uuid4().hex[:12]}")


@dataclass
class ScriptedRequest:
    """What the model received in one call."""

    kind: str  # "chat", "stream_chat", "complete", "stream_complete" (async calls use the same names)
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI function-tool format, as sent

    def text(self) -> str:
        """Every message's text joined by newlines (handy for ``in`` checks)."""
        return "\n".join(_message_text(m) for m in self.messages)

    def texts(self, role: str) -> list[str]:
        """The text of each message with ``role`` ("system", "user", "assistant", "tool"), in order."""
        return [_message_text(m) for m in self.messages if _role(m) == role]

    @property
    def system_texts(self) -> list[str]:
        """The text of every system message, in order."""
        return self.texts("system")

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


#: A script step: an answer, one tool call, several parallel tool calls, a full message, or a callable that
#: sees the request and returns one of those.
Step = str | ScriptedToolCall | Sequence[ScriptedToolCall] | ChatMessage | Callable[[ScriptedRequest], Any]


def _role(message: ChatMessage) -> str:
    role = message.role
    return role.value if isinstance(role, MessageRole) else str(role)


def _message_text(message: ChatMessage) -> str:
    parts = [b.text for b in message.blocks if isinstance(b, TextBlock)]
    return "\n".join(parts)


class ScriptedFunctionCallingLLM(FunctionCallingLLM):
    """A function-calling LLM that answers from a script and records every request.

    Steps are consumed in order, one per call (``chat``, ``achat``, ``stream_chat``, ``astream_chat``,
    ``complete`` and friends all take the next step). A step is a string (the answer), a
    :class:`ScriptedToolCall` or a list of them (parallel tool calls), a ``ChatMessage``, or a callable that
    receives the :class:`ScriptedRequest` and returns any of these. Running past the end raises
    :class:`ScriptExhaustedError` (or returns ``default`` when one is given).

    Example:
        >>> llm = ScriptedFunctionCallingLLM(["hello"])
        >>> llm.metadata.is_function_calling_model
        True
        >>> llm.complete("hi").text
        'hello'
    """

    _script: list[Any] = PrivateAttr(default_factory=list)
    _requests: list[ScriptedRequest] = PrivateAttr(default_factory=list)
    _default: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default=None)
    _model_name: str = PrivateAttr(default="scripted")
    _context_window: int = PrivateAttr(default=32768)
    _stream_chunk: int = PrivateAttr(default=8)

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        default: Step | None = None,
        model_name: str = "scripted",
        context_window: int = 32768,
        stream_chunk_chars: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._script = list(script)
        self._requests = []
        self._default = default
        self._lock = threading.Lock()
        self._model_name = model_name
        self._context_window = context_window
        self._stream_chunk = max(1, int(stream_chunk_chars))

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedFunctionCallingLLM"

    # -- inspection -----------------------------------------------------------------------------
    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every request so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self._requests)

    @staticmethod
    def tool_call(
        name: str, args: dict[str, Any] | None = None, *, call_id: str | None = None
    ) -> ScriptedToolCall:
        """Same as the module-level :func:`tool_call`."""
        return tool_call(name, args, call_id=call_id)

    @property
    def remaining(self) -> int:
        """Steps not played yet."""
        return len(self._script)

    def extend(self, steps: Iterable[Step]) -> None:
        """Append steps to the script."""
        with self._lock:
            self._script.extend(steps)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self._context_window,
            num_output=1024,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self._model_name,
        )

    # -- the script -----------------------------------------------------------------------------
    def _record(self, kind: str, messages: Sequence[ChatMessage], tools: Any) -> ScriptedRequest:
        copied = [m.model_copy(deep=True) for m in messages]
        request = ScriptedRequest(kind, copied, [dict(t) for t in (tools or [])])
        with self._lock:
            self._requests.append(request)
        return request

    def _next_message(self, request: ScriptedRequest) -> ChatMessage:
        with self._lock:
            if self._script:
                step = self._script.pop(0)
            elif self._default is not None:
                step = self._default
            else:
                raise ScriptExhaustedError(
                    f"ScriptedFunctionCallingLLM has no step left for request #{len(self._requests)} "
                    f"({request.kind}); add more steps to the script or pass default=..."
                )
        if callable(step) and not isinstance(step, (ScriptedToolCall, ChatMessage)):
            step = step(request)
        return _to_message(step)

    def _respond(self, kind: str, messages: Sequence[ChatMessage], tools: Any = None) -> ChatResponse:
        request = self._record(kind, messages, tools)
        message = self._next_message(request)
        return ChatResponse(message=message, raw={"model": self._model_name, "request": len(self._requests)})

    def _chunks(self, response: ChatResponse) -> list[ChatResponse]:
        """Split a response into streamed chunks; tool calls ride on the last chunk only."""
        message = response.message
        text = _message_text(message)
        size = self._stream_chunk
        pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        out: list[ChatResponse] = []
        so_far = ""
        for index, piece in enumerate(pieces):
            so_far += piece
            last = index == len(pieces) - 1
            if last:
                chunk_message = message
            else:
                chunk_message = ChatMessage(role=MessageRole.ASSISTANT, content=so_far)
            out.append(ChatResponse(message=chunk_message, delta=piece, raw=response.raw))
        return out

    # -- chat -----------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond("chat", messages, kwargs.get("tools"))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond("chat", messages, kwargs.get("tools"))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        chunks = self._chunks(self._respond("stream_chat", messages, kwargs.get("tools")))

        def gen() -> Generator[ChatResponse, None, None]:
            yield from chunks

        return gen()

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        chunks = self._chunks(self._respond("stream_chat", messages, kwargs.get("tools")))

        async def gen() -> AsyncGenerator[ChatResponse, None]:
            for chunk in chunks:
                yield chunk

        return gen()

    # -- completion -----------------------------------------------------------------------------
    def _complete(self, kind: str, prompt: str) -> CompletionResponse:
        response = self._respond(kind, [ChatMessage(role=MessageRole.USER, content=prompt)])
        return CompletionResponse(text=_message_text(response.message), raw=response.raw)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._complete("complete", prompt)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._complete("complete", prompt)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        full = self._complete("stream_complete", prompt)

        def gen() -> Generator[CompletionResponse, None, None]:
            yield CompletionResponse(text=full.text, delta=full.text, raw=full.raw)

        return gen()

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        full = self._complete("stream_complete", prompt)

        async def gen() -> AsyncGenerator[CompletionResponse, None]:
            yield CompletionResponse(text=full.text, delta=full.text, raw=full.raw)

        return gen()

    # -- function calling -----------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Shape the request like an OpenAI-style integration: tools as ``metadata.to_openai_tool()``."""
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                ChatMessage(role=MessageRole.USER, content=user_msg)
                if isinstance(user_msg, str)
                else user_msg
            )
        tool_specs = [tool.metadata.to_openai_tool() for tool in tools]
        return {"messages": messages, "tools": tool_specs}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        raw_calls = response.message.additional_kwargs.get("tool_calls") or []
        selections = []
        for call in raw_calls:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            arguments = function.get("arguments") or "{}"
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            except json.JSONDecodeError:
                parsed = {}
            selections.append(
                ToolSelection(
                    tool_id=call.get("id", ""), tool_name=function.get("name", ""), tool_kwargs=parsed
                )
            )
        if not selections and error_on_no_tool_call:
            raise InvalidArgumentError(f"expected at least one tool call, got: {response.message.content!r}")
        return selections


def _to_message(step: Any) -> ChatMessage:
    if isinstance(step, ChatMessage):
        return step
    if isinstance(step, str):
        return ChatMessage(role=MessageRole.ASSISTANT, content=step)
    if isinstance(step, ScriptedToolCall):
        step = [step]
    if isinstance(step, (list, tuple)) and step and all(isinstance(s, ScriptedToolCall) for s in step):
        return _tool_call_message(list(step))
    raise ArgumentTypeError(
        "a script step must be a str, a ScriptedToolCall (see tool_call()), a list of them, a ChatMessage, "
        f"or a callable returning one of those; got {type(step).__name__}"
    )


def _tool_call_message(calls: list[ScriptedToolCall]) -> ChatMessage:
    openai_calls: list[dict[str, Any]] = [
        {
            "id": call.id or f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.args, ensure_ascii=False)},
        }
        for call in calls
    ]
    blocks: list[Any] = []
    if _ToolCallBlock is not None:
        blocks = [
            _ToolCallBlock(tool_call_id=c["id"], tool_name=c["function"]["name"], tool_kwargs=call.args)
            for c, call in zip(openai_calls, calls, strict=True)
        ]
    message = ChatMessage(
        role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs={"tool_calls": openai_calls}
    )
    return message
