"""LangChain and LlamaIndex models on the local llama.cpp engine (:class:`ironmem.local.LocalModel`), in-process.

- :class:`LocalChatModel` - a LangChain ``BaseChatModel`` with ``bind_tools``, for ``create_agent`` +
  :class:`~ironmem.adapters.langchain.IronMemoryMiddleware`.
- :class:`LocalFunctionCallingLLM` - a LlamaIndex ``FunctionCallingLLM``, for ``FunctionAgent`` +
  :class:`~ironmem.adapters.llama_index.IronMemory`.

Both send the real request (system prompt, history, fenced recall, tool schemas) through the model's chat template
to the engine and return what the model wrote, with its usage in the provider shapes the usage meter reads
(cached tokens = prompt tokens the engine did not evaluate). SmolLM2-135M does not call tools reliably, so both
take an optional ``script``: one entry per model call, in order (or one callable asked at every call); an entry that is a tool call (``{"name",
"args"}``, or a list of them) makes that call's reply the scripted tool call - the engine still evaluates the
request's prompt, so the KV cache and the timings stay real - and ``None`` lets the model answer. Past the end of
the script the model answers every call. A ``<tool_call>{...}</tool_call>`` block the model writes itself is
parsed into a real tool call.

Example:
    >>> from ironmem.local import LocalModel  # doctest: +SKIP
    >>> chat = LocalChatModel(model=LocalModel(), script=[{"name": "memory", "args": {...}}, None])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..local import Generation, LocalModel

__all__ = ["LocalChatModel", "LocalFunctionCallingLLM", "ScriptEntry", "parse_tool_calls"]

#: A script entry: None (the model answers), one tool call ``{"name", "args"}``, or a list of them; or a callable
#: that receives the request's messages (OpenAI-style dicts) and returns one of those.
ScriptEntry = Any

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> list[dict[str, Any]]:
    """Tool calls the model wrote as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks."""
    calls = []
    for match in _TOOL_CALL.finditer(text[:100_000]):
        try:
            data = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            args = data.get("arguments", data.get("args", {}))
            calls.append({"name": data["name"], "args": args if isinstance(args, dict) else {}})
    return calls


class _Scripted:
    """The shared part: the script cursor and one engine call under a lock."""

    def __init__(self, model: LocalModel, script: Sequence[ScriptEntry] | Callable[..., Any] | None,
                 max_tokens: int) -> None:
        self.model = model
        self.script: Any = script if callable(script) else list(script or ())
        self.max_tokens = max_tokens
        self.lock = threading.Lock()
        self.calls = 0
        self.generations: list[Generation] = []

    def run(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[Generation, list[dict[str, Any]], bool]:
        """One engine call; returns the generation, the tool calls of the reply, and whether they were scripted."""
        with self.lock:
            if callable(self.script):
                entry = self.script
            else:
                entry = self.script[self.calls] if self.calls < len(self.script) else None
            self.calls += 1
            if callable(entry):
                entry = entry(messages)
            scripted: list[dict[str, Any]] = []
            if entry is not None:
                scripted = [entry] if isinstance(entry, dict) else list(entry)
                for call in scripted:
                    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                        raise TypeError(
                            f"script entry {self.calls - 1} must be None, {{'name': ..., 'args': {{...}}}} or a "
                            f"list of those, got {entry!r}"
                        )
            generation = self.model.chat(messages, tools, max_tokens=1 if scripted else self.max_tokens)
            self.generations.append(generation)
            calls = [
                {"name": c["name"], "args": dict(c.get("args") or {}), "id": f"call_{uuid.uuid4().hex[:12]}"}
                for c in scripted
            ]
            if not scripted and tools:
                calls = [dict(c, id=f"call_{uuid.uuid4().hex[:12]}") for c in parse_tool_calls(generation.text)]
            return generation, calls, bool(scripted)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in (None, "text"):
            parts.append(str(block.get("text", "")))
    return "\n\n".join(p for p in parts if p)


# --------------------------------------------------------------------------------------------------
# LangChain
# --------------------------------------------------------------------------------------------------
try:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import ConfigDict, PrivateAttr

    _HAVE_LANGCHAIN = True
except ImportError:  # pragma: no cover - depends on the installed extras
    _HAVE_LANGCHAIN = False

if _HAVE_LANGCHAIN:

    class LocalChatModel(BaseChatModel):
        """A LangChain chat model on the local llama.cpp engine (see the module docs for ``script``).

        Example:
            >>> from ironmem.local import LocalModel  # doctest: +SKIP
            >>> model = LocalChatModel(model=LocalModel(), max_tokens=32)  # doctest: +SKIP
            >>> reply = model.invoke("Say hi.")  # doctest: +SKIP
            >>> reply.usage_metadata["input_token_details"]["cache_read"]  # doctest: +SKIP
            0
        """

        model_config = ConfigDict(arbitrary_types_allowed=True)

        model: Any
        max_tokens: int = 64
        script: Any = None
        _run: Any = PrivateAttr(default=None)

        def model_post_init(self, context: Any) -> None:
            super().model_post_init(context)
            if not isinstance(self.model, LocalModel):
                raise TypeError(f"LocalChatModel(model=...) takes an ironmem.local.LocalModel, got {self.model!r}")
            self._run = _Scripted(self.model, self.script, self.max_tokens)

        @property
        def _llm_type(self) -> str:
            return "ironmem-local-llama-cpp"

        @property
        def generations(self) -> list[Generation]:
            """Every engine call so far, with its measured figures."""
            return list(self._run.generations)

        def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

        def _generate(
            self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            dicts = []
            for m in convert_to_openai_messages(messages):
                m = dict(m)
                m["content"] = _text_of(m.get("content"))
                dicts.append(m)
            generation, calls, scripted = self._run.run(dicts, list(kwargs.get("tools") or []))
            usage = generation.usage()
            message = AIMessage(
                content="" if scripted else generation.text,
                tool_calls=[{"name": c["name"], "args": c["args"], "id": c["id"], "type": "tool_call"}
                            for c in calls],
                usage_metadata={
                    "input_tokens": usage["prompt_tokens"],
                    "output_tokens": usage["completion_tokens"],
                    "total_tokens": usage["total_tokens"],
                    "input_token_details": {"cache_read": generation.cached},
                },
                response_metadata={
                    "model_name": self.model.model_path.name,
                    "finish_reason": "tool_calls" if calls else generation.stop_reason,
                    "evaluated_prompt_tokens": generation.evaluated,
                    "ttft_s": generation.ttft_s,
                    "total_s": generation.total_s,
                },
            )
            return ChatResult(generations=[ChatGeneration(message=message)])

else:  # pragma: no cover

    class LocalChatModel:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError('LocalChatModel needs LangChain: pip install "ironmem[langchain,local]"')


# --------------------------------------------------------------------------------------------------
# LlamaIndex
# --------------------------------------------------------------------------------------------------
try:
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        CompletionResponse,
        LLMMetadata,
        MessageRole,
        TextBlock,
    )
    from llama_index.core.bridge.pydantic import PrivateAttr as _LIPrivateAttr
    from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
    from llama_index.core.llms.function_calling import FunctionCallingLLM
    from llama_index.core.llms.llm import ToolSelection

    try:
        from llama_index.core.base.llms.types import ToolCallBlock as _ToolCallBlock
    except ImportError:  # pragma: no cover - older 0.14.x
        _ToolCallBlock = None  # type: ignore[assignment,misc]
    _HAVE_LLAMA_INDEX = True
except ImportError:  # pragma: no cover
    _HAVE_LLAMA_INDEX = False


def _li_dict(message: Any) -> dict[str, Any]:
    role = message.role.value if hasattr(message.role, "value") else str(message.role)
    text = "\n\n".join(b.text for b in message.blocks if isinstance(b, TextBlock) and b.text)
    out: dict[str, Any] = {"role": role if role in ("system", "user", "assistant", "tool") else "user",
                           "content": text}
    calls = message.additional_kwargs.get("tool_calls") or []
    if not calls and _ToolCallBlock is not None:
        calls = [
            {"id": b.tool_call_id, "function": {"name": b.tool_name, "arguments": b.tool_kwargs}}
            for b in message.blocks if isinstance(b, _ToolCallBlock)
        ]
    if calls:
        out["tool_calls"] = [c if isinstance(c, dict) else {"function": {"name": getattr(c, "name", "")}}
                             for c in calls]
    return out


if _HAVE_LLAMA_INDEX:

    class LocalFunctionCallingLLM(FunctionCallingLLM):
        """A LlamaIndex function-calling LLM on the local llama.cpp engine (see the module docs for ``script``).

        ``FunctionAgent`` streams by default: the stream is one chunk holding the whole reply.

        Example:
            >>> from ironmem.local import LocalModel  # doctest: +SKIP
            >>> llm = LocalFunctionCallingLLM(LocalModel())  # doctest: +SKIP
            >>> llm.metadata.is_function_calling_model  # doctest: +SKIP
            True
        """

        _run: Any = _LIPrivateAttr(default=None)

        def __init__(self, model: LocalModel, *, max_tokens: int = 64, script: Sequence[ScriptEntry] | None = None,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            if not isinstance(model, LocalModel):
                raise TypeError(f"LocalFunctionCallingLLM takes an ironmem.local.LocalModel, got {model!r}")
            self._run = _Scripted(model, script, max_tokens)

        @classmethod
        def class_name(cls) -> str:
            return "LocalFunctionCallingLLM"

        @property
        def generations(self) -> list[Generation]:
            return list(self._run.generations)

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(
                context_window=self._run.model.n_ctx,
                num_output=self._run.max_tokens,
                is_chat_model=True,
                is_function_calling_model=True,
                model_name=self._run.model.model_path.name,
            )

        def _respond(self, messages: Sequence[Any], tools: Any) -> ChatResponse:
            generation, calls, scripted = self._run.run([_li_dict(m) for m in messages], list(tools or []))
            openai_calls = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["args"], ensure_ascii=False)}}
                for c in calls
            ]
            text = "" if scripted else generation.text
            blocks: list[Any] = [TextBlock(text=text)] if text else []
            if calls and _ToolCallBlock is not None:
                blocks += [_ToolCallBlock(tool_call_id=c["id"], tool_name=c["name"], tool_kwargs=c["args"])
                          for c in calls]
            kwargs = {"tool_calls": openai_calls} if calls else {}
            message = ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs=kwargs)
            raw = {"model": self.metadata.model_name, "usage": generation.usage(),
                   "evaluated_prompt_tokens": generation.evaluated, "ttft_s": generation.ttft_s,
                   "total_s": generation.total_s}
            return ChatResponse(message=message, raw=raw, delta=text)

        @llm_chat_callback()
        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            return self._respond(messages, kwargs.get("tools"))

        @llm_chat_callback()
        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            return self._respond(messages, kwargs.get("tools"))

        @llm_chat_callback()
        def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            response = self._respond(messages, kwargs.get("tools"))

            def gen() -> Any:
                yield response

            return gen()

        @llm_chat_callback()
        async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
            response = self._respond(messages, kwargs.get("tools"))

            async def gen() -> Any:
                yield response

            return gen()

        def _complete(self, prompt: str) -> CompletionResponse:
            response = self._respond([ChatMessage(role=MessageRole.USER, content=prompt)], None)
            return CompletionResponse(text=response.message.content or "", raw=response.raw)

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return self._complete(prompt)

        @llm_completion_callback()
        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return self._complete(prompt)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            full = self._complete(prompt)

            def gen() -> Any:
                yield CompletionResponse(text=full.text, delta=full.text, raw=full.raw)

            return gen()

        @llm_completion_callback()
        async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            full = self._complete(prompt)

            async def gen() -> Any:
                yield CompletionResponse(text=full.text, delta=full.text, raw=full.raw)

            return gen()

        def _prepare_chat_with_tools(
            self, tools: Sequence[Any], user_msg: Any = None, chat_history: list[ChatMessage] | None = None,
            verbose: bool = False, allow_parallel_tool_calls: bool = False, tool_required: bool = False,
            **kwargs: Any,
        ) -> dict[str, Any]:
            messages = list(chat_history or [])
            if user_msg is not None:
                messages.append(ChatMessage(role=MessageRole.USER, content=user_msg)
                                if isinstance(user_msg, str) else user_msg)
            return {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools]}

        def get_tool_calls_from_response(
            self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
        ) -> list[ToolSelection]:
            selections = []
            for call in response.message.additional_kwargs.get("tool_calls") or []:
                fn = call.get("function", {})
                args = fn.get("arguments") or "{}"
                try:
                    parsed = json.loads(args) if isinstance(args, str) else dict(args)
                except json.JSONDecodeError:
                    parsed = {}
                selections.append(ToolSelection(tool_id=call.get("id", ""), tool_name=fn.get("name", ""),
                                                tool_kwargs=parsed))
            if not selections and error_on_no_tool_call:
                raise ValueError(f"expected at least one tool call, got: {response.message.content!r}")
            return selections

else:  # pragma: no cover

    class LocalFunctionCallingLLM:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError('LocalFunctionCallingLLM needs LlamaIndex: pip install "ironmem[llama-index,local]"')
