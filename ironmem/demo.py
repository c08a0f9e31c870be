"""The logic behind ``ironmem demo`` and ``ironmem simulate`` (the CLI only parses options and prints).

``run_demo`` runs a scripted two-session conversation through a real agent loop - LangChain's ``create_agent``
with :class:`~ironmem.adapters.langchain.IronMemoryMiddleware`, or LlamaIndex's ``FunctionAgent`` with
:class:`~ironmem.adapters.llama_index.IronMemory` - on the built-in memory in a temporary home. The model is
scripted (no API key, no server) unless ``model="provider:name"`` names a real one. It records every request the
model received and reports:

- the system prompt hash of each request (constant within a session: rule 3),
- the fenced recall of each turn (rule 2), including the write made earlier in the same session (live delta),
- the memory write (the tool call and its result),
- the next session's frozen snapshot, which now holds the write,
- the token report (fence overhead, tool schemas, snapshot) and a prefix-cache simulation over the demo's real
  recorded requests (OpenAI, Anthropic and vLLM policies); with a real model, the cached tokens the provider
  reported.

``run_simulation`` replays a longer scripted session (:mod:`ironmem.analysis.replay`) under the four memory strategies
and each provider policy.

Example:
    >>> result = run_demo(console=None)  # doctest: +SKIP
    >>> len({r.system_hash for r in result.requests if r.session == 1})  # doctest: +SKIP
    1
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .core.errors import EncodingUnavailableError, IronMemError
from .core.fence import FENCE_OPEN
from .core.manager import MemoryManager
from .core.provider import ToolSchema
from .core.recall import split_fence

__all__ = [
    "MODEL_KEYS",
    "SCRIPT",
    "DemoError",
    "DemoRequest",
    "DemoResult",
    "DemoTurn",
    "parse_policy",
    "print_demo",
    "print_token_report",
    "run_demo",
    "run_simulation",
    "simulate_requests",
]

FRAMEWORKS = ("langchain", "llama-index")

#: Environment variable holding the API key of each supported ``--model`` provider.
MODEL_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
#: The LangChain integration package of each provider.
MODEL_PACKAGES = {"openai": "langchain-openai", "anthropic": "langchain-anthropic"}

#: Seconds between two requests of the demo, and between its two sessions, for the cache simulation.
REQUEST_GAP_S = 20.0
SESSION_GAP_S = 120.0


class DemoError(IronMemError, ValueError):
    """Bad demo or simulation input (unknown framework, model, policy, missing key): the message says what to do."""


# --------------------------------------------------------------------------------------------------
# The script (framework-neutral)
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class View:
    """What a scripted answer can look at: the system prompt and the latest user message, as sent."""

    system: str
    user: str


@dataclass(frozen=True)
class ToolStep:
    """The scripted model calls tool ``name`` with ``args``."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class AnswerStep:
    """The scripted model answers; ``reply(view)`` may depend on what the request carried."""

    reply: Callable[[View], str]


@dataclass(frozen=True)
class ScriptTurn:
    session: int
    user: str
    steps: tuple[ToolStep | AnswerStep, ...]


def _answer(text: str) -> AnswerStep:
    return AnswerStep(lambda view: text)


def _ci_answer(view: View) -> str:
    if "Python 3.12" in view.user and FENCE_OPEN in view.user:
        return "Use Python 3.12 for the CI image: tidepool targets 3.12 (it came back in this turn's recalled memory)."
    if "Python 3.12" in view.system:
        return "Use Python 3.12 for the CI image: tidepool targets 3.12 (it is in my memory snapshot)."
    return "Which Python version does tidepool target? I don't have that yet."


def _deploy_answer(view: View) -> str:
    if "Fly.io" in view.system:
        return "tidepool deploys on Fly.io - it is in my memory from our last session."
    return "I don't know where tidepool deploys."


def _search_answer(view: View) -> str:
    if "3.12" in view.user or "3.12" in view.system:
        return "Last time we settled on Python 3.12 for the CI image, matching what tidepool targets."
    return "I couldn't find that in our past conversations."


#: The demo conversation: session 1 saves two facts and uses them in the next turn (live delta); session 2
#: finds them in its frozen snapshot and searches the past session.
SCRIPT: tuple[ScriptTurn, ...] = (
    ScriptTurn(
        1,
        "Hi, I'm Ada. I maintain tidepool, our ocean-data API. It targets Python 3.12 and we deploy on "
        "Fly.io.",
        (
            ToolStep(
                "memory",
                {
                    "operations": [
                        {
                            "action": "add",
                            "target": "user",
                            "content": "Name: Ada; maintains tidepool, an ocean-data API",
                        },
                        {
                            "action": "add",
                            "target": "memory",
                            "content": "tidepool targets Python 3.12 and deploys on Fly.io",
                        },
                    ]
                },
            ),
            _answer(
                "Nice to meet you, Ada. Saved: you maintain tidepool, which targets Python 3.12 on Fly.io."
            ),
        ),
    ),
    ScriptTurn(1, "Which Python version should the new CI image use?", (AnswerStep(_ci_answer),)),
    ScriptTurn(1, "Great, that's all for today.", (_answer("See you next time, Ada."),)),
    ScriptTurn(2, "I'm back. Remind me where tidepool deploys?", (AnswerStep(_deploy_answer),)),
    ScriptTurn(
        2,
        "What did we decide about the CI image last time?",
        (
            ToolStep("session_search", {"query": "CI image Python version"}),
            AnswerStep(_search_answer),
        ),
    ),
)


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------
def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fence_in(text: str) -> str:
    """The fenced recall an adapter put before the user's text ("" when there is none)."""
    return split_fence(text)[0]


@dataclass
class DemoRequest:
    """One request the model received, normalized: system blocks, messages as dicts, tools (OpenAI format)."""

    number: int
    session: int
    turn: int
    at: float
    system_blocks: list[str]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reply_tool_calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def system_text(self) -> str:
        return "\n\n".join(self.system_blocks)

    @property
    def system_hash(self) -> str:
        """SHA-256 of the whole system prompt as sent (every block)."""
        return _sha(self.system_text)

    @property
    def recall_fenced(self) -> str:
        """The fence carried by the latest user message of this request ("" when none)."""
        for message in reversed(self.messages):
            if message["role"] == "user":
                return _fence_in(message["content"])
        return ""

    def to_chat_request(self) -> Any:
        from .analysis.replay import ChatRequest

        tools = tuple(
            ToolSchema(
                t["function"]["name"],
                t["function"].get("description", ""),
                t["function"].get("parameters") or {"type": "object", "properties": {}},
            )
            for t in self.tools
        )
        return ChatRequest(tools=tools, system=tuple(self.system_blocks), messages=tuple(self.messages))

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "session": self.session,
            "turn": self.turn,
            "at": self.at,
            "system_sha256": self.system_hash,
            "messages": len(self.messages),
            "tools": [t["function"]["name"] for t in self.tools],
            "recall_fenced": self.recall_fenced,
            "reply_tool_calls": self.reply_tool_calls,
        }


@dataclass
class DemoTurn:
    """One user turn: what the user said, what memory did, what the assistant answered."""

    session: int
    turn: int
    user: str
    answer: str = ""
    requests: list[int] = field(default_factory=list)
    recall_fenced: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # name, args, result

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "turn": self.turn,
            "user": self.user,
            "answer": self.answer,
            "requests": self.requests,
            "recall_fenced": self.recall_fenced,
            "tool_calls": self.tool_calls,
        }


@dataclass
class DemoResult:
    """Everything the demo observed. ``to_dict()`` is what ``ironmem demo --json`` prints."""

    framework: str
    model: str
    home: str
    turns: list[DemoTurn]
    requests: list[DemoRequest]
    snapshots: dict[int, str]  # the memory block of each session's frozen snapshot
    token_report: Any = None
    cache: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    seconds: float = 0.0
    #: Why the token and cache report was left out (the tokenizer's encoding could not be loaded), else None.
    tokens_unavailable: str | None = None

    def hashes(self, session: int) -> list[str]:
        return [r.system_hash for r in self.requests if r.session == session]

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "model": self.model,
            "home": self.home,
            "turns": [t.to_dict() for t in self.turns],
            "requests": [r.to_dict() for r in self.requests],
            "system_prompt_hashes": {str(s): sorted(set(self.hashes(s))) for s in sorted(self.snapshots)},
            "snapshots": {str(k): v for k, v in self.snapshots.items()},
            "token_report": self.token_report.to_dict() if self.token_report is not None else None,
            "cache_simulation": self.cache,
            "usage": self.usage,
            "tokens_unavailable": self.tokens_unavailable,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------------------------------
# Model choice
# --------------------------------------------------------------------------------------------------
def _parse_model(model: str) -> tuple[str, str]:
    provider, sep, name = model.partition(":")
    provider = provider.strip().lower()
    if not sep or not name.strip():
        raise DemoError(
            f"--model must be provider:name, such as openai:gpt-4.1-mini or anthropic:claude-sonnet-4-5 (got {model!r})"
        )
    if provider not in MODEL_KEYS:
        raise DemoError(
            f"unknown model provider {provider!r} in --model {model!r}; the demo supports "
            f"{', '.join(sorted(MODEL_KEYS))}"
        )
    return provider, name.strip()


#: ``--model local``: SmolLM2-135M-Instruct on llama.cpp in this process (extra ``ironmem[local]``).
LOCAL_MODEL = "local"


def _is_local(model: str | None) -> bool:
    return model is not None and model.strip().lower() == LOCAL_MODEL


def _check_local() -> None:
    from .local import LOCAL_EXTRA_HINT, LocalModelUnavailableError, find_model_path, llama_cpp_available

    if not llama_cpp_available():
        raise DemoError(f"--model local needs llama-cpp-python: {LOCAL_EXTRA_HINT}")
    try:
        find_model_path()
    except LocalModelUnavailableError as exc:
        raise DemoError(f"--model local: {exc}") from None


def _local_chat_model() -> Any:
    """The local model for the LangChain demo: the script's tool calls are scripted, the model writes the rest."""
    from .local import LocalModel
    from .testing.local_model import LocalChatModel

    calls = {t.user: [{"name": s.name, "args": s.args} for s in t.steps if isinstance(s, ToolStep)] for t in SCRIPT}

    def script(messages: list[dict[str, Any]]) -> Any:
        # Script the tool call when a turn that has one starts (the last message is the user's); else the model.
        last = messages[-1] if messages else {}
        if last.get("role") != "user":
            return None
        return next((c for user, c in calls.items() if c and str(last.get("content", "")).endswith(user)), None)

    return LocalChatModel(model=LocalModel(n_ctx=8192), max_tokens=64, script=script)


def _real_model(model: str) -> Any:
    if _is_local(model):
        return _local_chat_model()
    provider, name = _parse_model(model)
    key = MODEL_KEYS[provider]
    if not os.environ.get(key):
        raise DemoError(
            f"--model {model} needs an API key: set {key} (or run the demo without --model, offline)"
        )
    try:
        from langchain.chat_models import init_chat_model

        return init_chat_model(f"{provider}:{name}")
    except ImportError as exc:
        raise DemoError(
            f"--model {model} needs the {MODEL_PACKAGES[provider]} package: pip install {MODEL_PACKAGES[provider]}"
        ) from exc


# --------------------------------------------------------------------------------------------------
# LangChain run
# --------------------------------------------------------------------------------------------------
def _lc_message_dict(message: Any) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    if isinstance(message, HumanMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, AIMessage):
        out: dict[str, Any] = {"role": "assistant", "content": message.text}
        if message.tool_calls:
            out["tool_calls"] = [
                {"id": c.get("id") or "", "name": c["name"], "arguments": c.get("args", {})}
                for c in message.tool_calls
            ]
        return out
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    return {"role": "user", "content": getattr(message, "text", str(message))}


def _lc_system_blocks(system: Any) -> list[str]:
    if system is None:
        return []
    content = system.content
    if isinstance(content, str):
        return [content] if content else []
    return [b if isinstance(b, str) else str(b.get("text", "")) for b in content]


def _lc_steps(turns: Sequence[ScriptTurn]) -> list[Any]:
    from langchain_core.messages import AIMessage

    from .testing.langchain import ScriptedChatModel

    steps: list[Any] = []
    counter = 0
    for turn in turns:
        for step in turn.steps:
            if isinstance(step, ToolStep):
                counter += 1
                steps.append(
                    ScriptedChatModel.tool_call(step.name, step.args, call_id=f"call_demo_{counter}")
                )
            else:
                reply = step.reply

                def answer(messages: list[Any], reply: Callable[[View], str] = reply) -> AIMessage:
                    system = next((m.text for m in messages if m.type == "system"), "")
                    user = next((m.text for m in reversed(messages) if m.type == "human"), "")
                    return AIMessage(content=reply(View(system, user)))

                steps.append(answer)
    return steps


def _run_langchain(
    manager: MemoryManager, model: str | None, tag: str, chat_model: Any = None
) -> tuple[list[DemoRequest], list[DemoTurn], Any]:
    from langchain.agents import create_agent
    from langchain.agents.middleware.types import AgentMiddleware
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.checkpoint.memory import InMemorySaver

    from .adapters.langchain import IronMemoryMiddleware
    from .analysis.replay import APP_TOOLS, BASE_SYSTEM_PROMPT
    from .analysis.usage import UsageMeter
    from .testing.langchain import ScriptedChatModel

    requests: list[DemoRequest] = []
    meter = UsageMeter()
    where = {"session": 0, "turn": 0}

    class _Recorder(AgentMiddleware):  # type: ignore[type-arg]
        """Records each request exactly as it leaves for the model (after ironmem's changes)."""

        def _record(self, request: Any) -> DemoRequest:
            tools = [t if isinstance(t, dict) else convert_to_openai_tool(t) for t in request.tools]
            record = DemoRequest(
                number=len(requests) + 1,
                session=where["session"],
                turn=where["turn"],
                at=0.0,
                system_blocks=_lc_system_blocks(request.system_message),
                messages=[_lc_message_dict(m) for m in request.messages],
                tools=tools,
            )
            requests.append(record)
            return record

        def _seen(self, record: DemoRequest, response: Any) -> None:
            result = getattr(response, "result", None)
            messages = result if isinstance(result, list) else [response]
            for message in messages:
                if isinstance(message, AIMessage):
                    meter.add(message)
                    record.reply_tool_calls = [
                        {"name": c["name"], "args": c.get("args", {})} for c in message.tool_calls
                    ]

        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            record = self._record(request)
            response = handler(request)
            self._seen(record, response)
            return response

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            record = self._record(request)
            response = await handler(request)
            self._seen(record, response)
            return response

    def _app_tool(schema: ToolSchema) -> StructuredTool:
        def offline(**kwargs: Any) -> str:
            return json.dumps({"error": f"{schema.name} is not available in the offline demo"})

        return StructuredTool(
            name=schema.name,
            description=schema.description,
            args_schema=dict(schema.parameters),
            func=offline,
        )

    real = model is not None or chat_model is not None
    if chat_model is None:
        chat_model = _real_model(model) if model is not None else ScriptedChatModel(_lc_steps(SCRIPT))
    memory = IronMemoryMiddleware(manager)
    middleware: list[Any] = [memory, _Recorder()]
    if model is not None and model.lower().startswith("anthropic:"):
        from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

        middleware.append(AnthropicPromptCachingMiddleware())
    agent = create_agent(
        chat_model,
        tools=[_app_tool(s) for s in APP_TOOLS],
        system_prompt=BASE_SYSTEM_PROMPT,
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )
    turns: list[DemoTurn] = []
    turn_in_session: dict[int, int] = {}
    for index, spec in enumerate(SCRIPT):
        where["session"] = spec.session
        turn_in_session[spec.session] = turn_in_session.get(spec.session, 0) + 1
        where["turn"] = turn_in_session[spec.session]
        thread_id = f"demo-{tag}-session-{spec.session}"
        first = len(requests)
        state = agent.invoke(
            {"messages": [HumanMessage(spec.user)]},
            {"configurable": {"thread_id": thread_id, "user_id": "ada"}},
        )
        turn = DemoTurn(spec.session, where["turn"], spec.user)
        turn.requests = [r.number for r in requests[first:]]
        turn.recall_fenced = requests[first].recall_fenced if len(requests) > first else ""
        messages = state["messages"]
        start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        results = {m.tool_call_id: m.text for m in messages[start:] if isinstance(m, ToolMessage)}
        for message in messages[start:]:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    turn.tool_calls.append(
                        {
                            "name": call["name"],
                            "args": call.get("args", {}),
                            "result": results.get(call.get("id") or "", ""),
                        }
                    )
        answers = [m.text for m in messages[start:] if isinstance(m, AIMessage) and m.text.strip()]
        turn.answer = answers[-1] if answers else ""
        turns.append(turn)
        if index + 1 == len(SCRIPT) or SCRIPT[index + 1].session != spec.session:
            memory.end_session(thread_id)  # drains the session's syncs before the next one starts
    memory.close()
    return requests, turns, meter if real else None


# --------------------------------------------------------------------------------------------------
# LlamaIndex run
# --------------------------------------------------------------------------------------------------
def _li_steps(turns: Sequence[ScriptTurn]) -> list[Any]:
    from .testing.llama_index import ScriptedToolCall

    steps: list[Any] = []
    counter = 0
    for turn in turns:
        for step in turn.steps:
            if isinstance(step, ToolStep):
                counter += 1
                steps.append(ScriptedToolCall(step.name, dict(step.args), f"call_demo_{counter}"))
            else:
                reply = step.reply

                def answer(request: Any, reply: Callable[[View], str] = reply) -> str:
                    system = "\n".join(request.texts("system"))
                    users = request.texts("user")
                    return reply(View(system, users[-1] if users else ""))

                steps.append(answer)
    return steps


def _li_message_dict(message: Any) -> dict[str, Any]:
    role = message.role.value if hasattr(message.role, "value") else str(message.role)
    text = "\n".join(getattr(b, "text", "") for b in message.blocks if hasattr(b, "text"))
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": text}
        calls = message.additional_kwargs.get("tool_calls") or []
        if calls:
            out["tool_calls"] = [_li_call(c) for c in calls]
        return out
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": str(message.additional_kwargs.get("tool_call_id", "")),
            "content": text,
        }
    return {"role": "user", "content": text}


def _li_call(call: Any) -> dict[str, Any]:
    if isinstance(call, dict):
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = {"raw": args}
        return {"id": call.get("id", ""), "name": fn.get("name", ""), "arguments": args}
    return {"id": getattr(call, "id", ""), "name": getattr(call, "name", ""), "arguments": {}}


def _run_llama_index(manager: MemoryManager, tag: str) -> tuple[list[DemoRequest], list[DemoTurn]]:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.agent.workflow.workflow_events import ToolCallResult
    from llama_index.core.tools import FunctionTool

    from .adapters.llama_index import IronMemory
    from .analysis.replay import APP_TOOLS, BASE_SYSTEM_PROMPT
    from .testing.llama_index import ScriptedFunctionCallingLLM

    llm = ScriptedFunctionCallingLLM(_li_steps(SCRIPT))

    def _offline(name: str) -> Callable[..., str]:
        def run(**kwargs: Any) -> str:
            return json.dumps({"error": f"{name} is not available in the offline demo"})

        return run

    app_tools = [
        FunctionTool.from_defaults(fn=_offline(s.name), name=s.name, description=s.description)
        for s in APP_TOOLS
    ]
    requests: list[DemoRequest] = []
    turns: list[DemoTurn] = []
    turn_in_session: dict[int, int] = {}

    async def run_all() -> None:
        memories: dict[int, Any] = {}
        for spec in SCRIPT:
            turn_in_session[spec.session] = turn_in_session.get(spec.session, 0) + 1
            number = turn_in_session[spec.session]
            if spec.session not in memories:
                for old in memories.values():
                    old.close()
                memories[spec.session] = IronMemory.from_defaults(
                    manager=manager, session_id=f"demo-{tag}-session-{spec.session}", user_id="ada"
                )
            memory = memories[spec.session]
            tools = memory.tools() + app_tools
            agent = FunctionAgent(tools=tools, llm=llm, system_prompt=BASE_SYSTEM_PROMPT)
            first = len(llm.requests)
            handler = agent.run(spec.user, memory=memory)
            turn = DemoTurn(spec.session, number, spec.user)
            async for event in handler.stream_events():
                if isinstance(event, ToolCallResult):
                    turn.tool_calls.append(
                        {
                            "name": event.tool_name,
                            "args": dict(event.tool_kwargs),
                            "result": str(event.tool_output.content),
                        }
                    )
            response = await handler
            turn.answer = str(getattr(getattr(response, "response", response), "content", "") or "")
            for recorded in llm.requests[first:]:
                system = [m for m in recorded.messages if _role_of(m) == "system"]
                rest = [m for m in recorded.messages if _role_of(m) != "system"]
                record = DemoRequest(
                    number=len(requests) + 1,
                    session=spec.session,
                    turn=number,
                    at=0.0,
                    system_blocks=[
                        "\n".join(getattr(b, "text", "") for b in m.blocks if hasattr(b, "text"))
                        for m in system
                    ],
                    messages=[_li_message_dict(m) for m in rest],
                    tools=list(recorded.tools),
                )
                requests.append(record)
                turn.requests.append(record.number)
            turn.recall_fenced = requests[turn.requests[0] - 1].recall_fenced if turn.requests else ""
            turns.append(turn)
        for memory in memories.values():
            memory.close()

    asyncio.run(run_all())
    return requests, turns


def _role_of(message: Any) -> str:
    role = message.role
    return role.value if hasattr(role, "value") else str(role)


# --------------------------------------------------------------------------------------------------
# Cache simulation over recorded requests
# --------------------------------------------------------------------------------------------------
#: The policies the demo reports, as ``--policy`` specs.
DEMO_POLICIES = ("openai:gpt-4.1", "anthropic:claude-sonnet-4-5", "vllm")


def parse_policy(spec: str) -> Any:
    """A cache policy from a spec: ``openai[:MODEL]``, ``anthropic[:MODEL[:1h]]``, ``gemini[:MODEL]``,
    ``deepseek[:MODEL]``, ``vllm[:BLOCK_SIZE]``.

    Example:
        >>> parse_policy("vllm:32").block_size
        32
    """
    from .analysis.cache import AnthropicPolicy, DeepSeekPolicy, GeminiPolicy, OpenAIPolicy, VLLMPolicy

    parts = [p.strip() for p in spec.split(":")]
    kind = parts[0].lower()
    rest = [p for p in parts[1:] if p]
    try:
        if kind == "openai":
            return OpenAIPolicy(model=rest[0]) if rest else OpenAIPolicy(model="gpt-4.1")
        if kind == "anthropic":
            ttl = "1h" if rest[1:] and rest[1] == "1h" else "5m"
            return AnthropicPolicy(model=rest[0] if rest else "claude-sonnet-4-5", ttl=ttl)
        if kind == "gemini":
            return GeminiPolicy(model=rest[0]) if rest else GeminiPolicy()
        if kind == "deepseek":
            return DeepSeekPolicy(model=rest[0]) if rest else DeepSeekPolicy()
        if kind == "vllm":
            return VLLMPolicy(block_size=int(rest[0])) if rest else VLLMPolicy()
    except KeyError as exc:
        raise DemoError(str(exc.args[0]) if exc.args else str(exc)) from None
    except ValueError as exc:
        raise DemoError(f"bad policy {spec!r}: {exc}") from None
    raise DemoError(
        f"unknown cache policy {spec!r}; use openai, anthropic, gemini, deepseek or vllm (optionally :MODEL)"
    )


def simulate_requests(
    requests: Sequence[DemoRequest], policies: Sequence[str] = DEMO_POLICIES, counter: Any = None
) -> list[dict[str, Any]]:
    """Replay recorded requests (in each provider's prefix order) through the simulator, one row per policy."""
    from .analysis.cache import PrefixCacheSimulator
    from .analysis.replay import request_tokens
    from .analysis.tokens import TokenCounter

    counter = counter or TokenCounter()
    rows = []
    for spec in policies:
        policy = parse_policy(spec)
        provider: Literal["openai", "anthropic"] = "anthropic" if policy.provider == "anthropic" else "openai"
        sim = PrefixCacheSimulator(policy)
        per_request = []
        for request in requests:
            tokens = request_tokens(request.to_chat_request(), counter, provider)
            outcome = sim.request(tokens.tokens, at=request.at, breakpoints=tokens.breakpoints or None)
            per_request.append(
                {
                    "number": request.number,
                    "session": request.session,
                    "tokens": len(tokens),
                    "cached": outcome.cached_tokens,
                    "written": outcome.cache_write_tokens,
                }
            )
        s = sim.summary()
        rows.append(
            {
                "policy": spec,
                "describe": policy.describe(),
                "requests": s.requests,
                "input_tokens": s.input_tokens,
                "cached_tokens": s.cached_tokens,
                "cache_write_tokens": s.cache_write_tokens,
                "cached_share": s.cached_share,
                "cost_usd": s.cost_usd,
                "cost_without_cache_usd": s.cost_without_cache_usd,
                "savings": s.savings,
                "per_request": per_request,
            }
        )
    return rows


def _assign_times(requests: Sequence[DemoRequest]) -> None:
    now = 0.0
    previous: DemoRequest | None = None
    for request in requests:
        if previous is not None:
            now += SESSION_GAP_S if request.session != previous.session else REQUEST_GAP_S
        request.at = now
        previous = request


# --------------------------------------------------------------------------------------------------
# run_demo
# --------------------------------------------------------------------------------------------------
def _check_framework(framework: str) -> None:
    """Fail with the install command when the framework's extra is missing."""
    import importlib.util

    needed = {"langchain": ("langchain", "langgraph"), "llama-index": ("llama_index.core",)}[framework]
    for module in needed:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            extra = "langchain" if framework == "langchain" else "llama-index"
            other = "llama-index" if framework == "langchain" else "langchain"
            raise DemoError(
                f'the {framework} demo needs {module.split(".")[0]}: pip install "ironmem[{extra}]" '
                f"(or run --framework {other} if that one is installed)"
            )


def run_demo(
    framework: str = "langchain",
    model: str | None = None,
    home: str | Path | None = None,
    console: Any = None,
    as_json: bool = False,
    chat_model: Any = None,
) -> DemoResult:
    """Run the two-session demo and print it to ``console`` (a rich Console), or as JSON with ``as_json``.

    ``home`` defaults to a temporary folder (removed afterwards). ``chat_model`` runs the LangChain demo with a
    chat model object you built (a real one, or any model reporting usage) instead of ``model="provider:name"``;
    the usage it reports is then collected as for a real model. Raises :class:`DemoError` for bad input.
    """
    from .analysis.tokens import TokenCounter, TokenReport

    if framework not in FRAMEWORKS:
        raise DemoError(f"unknown framework {framework!r}; use langchain or llama-index")
    if (model is not None or chat_model is not None) and framework != "langchain":
        raise DemoError("--model runs with the LangChain demo only; drop --framework llama-index")
    if _is_local(model):
        _check_local()
    elif model is not None:
        if framework != "langchain":
            raise DemoError("--model runs with the LangChain demo only; drop --framework llama-index")
        _parse_model(model)
        key = MODEL_KEYS[_parse_model(model)[0]]
        if not os.environ.get(key):
            raise DemoError(
                f"--model {model} needs an API key: set {key} (or run the demo without --model, offline)"
            )
    counter: TokenCounter | None = None
    tokens_unavailable: str | None = None
    try:
        counter = TokenCounter()  # loads the encoding: offline without TIKTOKEN_CACHE_DIR it cannot
    except EncodingUnavailableError as exc:
        # The agent loop and the memory need no tokenizer: run them, and say why the figures are missing.
        counter, tokens_unavailable = None, str(exc)
    started = time.perf_counter()
    tmp = None
    if home is None:
        tmp = tempfile.TemporaryDirectory(prefix="ironmem-demo-")
        home = tmp.name
    # Fixed session ids in a fresh temporary home (reproducible output); unique ones in a home that may hold
    # earlier demo runs, so their turns stay apart.
    tag = uuid.uuid4().hex[:6] if tmp is None else "run"
    try:
        with MemoryManager(home=home) as manager:
            meter = None
            _check_framework(framework)
            if framework == "langchain":
                requests, turns, meter = _run_langchain(manager, model, tag, chat_model)
            else:
                requests, turns = _run_llama_index(manager, tag)
            _assign_times(requests)
            snapshots: dict[int, str] = {}
            for request in requests:
                snapshots.setdefault(
                    request.session, request.system_blocks[-1] if request.system_blocks else ""
                )
            report = None
            if counter is not None:
                report_session = manager.start_session(f"demo-{tag}-report", user_id="ada")
                report_session.prefetch(SCRIPT[-1].user)
                report = TokenReport.for_session(report_session, counter)
                report_session.end()
        result = DemoResult(
            framework=framework,
            model=model or (type(chat_model).__name__ if chat_model is not None else "scripted (offline)"),
            home=str(home) if tmp is None else "(temporary folder, removed)",
            turns=turns,
            requests=requests,
            snapshots=snapshots,
            token_report=report,
            cache=simulate_requests(requests, counter=counter) if counter is not None else [],
            usage=meter.to_dict() if meter is not None else None,
            tokens_unavailable=tokens_unavailable,
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    result.seconds = time.perf_counter() - started
    if as_json:
        import sys

        sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False, indent=2) + "\n")
    elif console is not None:
        print_demo(result, console)
    return result


# --------------------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------------------
def print_demo(result: DemoResult, console: Any) -> None:
    """Print a :class:`DemoResult` with rich."""
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    loop = (
        "LangChain create_agent + IronMemoryMiddleware"
        if result.framework == "langchain"
        else "LlamaIndex FunctionAgent + IronMemory"
    )
    console.print(Text(f"ironmem demo: {loop}, model: {result.model}", style="bold"))
    console.print(Text(f"memory home: {result.home}", style="dim"))
    by_number = {r.number: r for r in result.requests}
    first_hash: dict[int, str] = {}
    for turn in result.turns:
        if turn.turn == 1:
            console.print(Rule(f"session {turn.session}"))
            snapshot = result.snapshots.get(turn.session, "")
            title = f"session {turn.session}: frozen memory block of the system prompt"
            console.print(Panel(Text(snapshot), title=title, title_align="left", border_style="cyan"))
        console.print(Text(f"[session {turn.session}, turn {turn.turn}] user: {turn.user}", style="bold"))
        if turn.recall_fenced:
            console.print(
                Panel(
                    Text(turn.recall_fenced),
                    title="fenced recall sent before the user's text",
                    title_align="left",
                    border_style="magenta",
                )
            )
        else:
            console.print(Text("  fenced recall: (nothing to recall)", style="dim"))
        for number in turn.requests:
            request = by_number[number]
            first = first_hash.setdefault(request.session, request.system_hash)
            same = "same as the session's first request" if request.system_hash == first else "CHANGED"
            console.print(
                Text(
                    f"  request {number}: system prompt sha256 {request.system_hash[:12]} ({same}), "
                    f"{len(request.messages)} messages, {len(request.tools)} tools"
                )
            )
        for call in turn.tool_calls:
            label = "memory write" if call["name"] == "memory" else "tool call"
            console.print(
                Text(
                    f"  {label}: {call['name']}({json.dumps(call['args'], ensure_ascii=False)})",
                    style="yellow",
                )
            )
            console.print(Text(f"    -> {_clip(call['result'], 240)}", style="yellow"))
        console.print(Text(f"  assistant: {turn.answer}", style="green"))

    console.print(Rule("what stayed constant"))
    table = Table(title="system prompt per request", title_justify="left")
    for column in (
        "request",
        "session",
        "turn",
        "system prompt sha256",
        "messages",
        "fence in last user msg",
    ):
        table.add_column(column)
    for request in result.requests:
        table.add_row(
            str(request.number),
            str(request.session),
            str(request.turn),
            request.system_hash[:16],
            str(len(request.messages)),
            "yes" if request.recall_fenced else "-",
        )
    console.print(table)
    for session in sorted(result.snapshots):
        hashes = set(result.hashes(session))
        verdict = "constant" if len(hashes) == 1 else f"{len(hashes)} different hashes"
        console.print(
            Text(f"session {session}: {len(result.hashes(session))} requests, system prompt {verdict}")
        )

    console.print(Rule("tokens"))
    if result.tokens_unavailable:
        console.print(Text(f"token and cache report skipped: {result.tokens_unavailable}", style="yellow"))
    if result.token_report is not None:
        print_token_report(result.token_report, console)
    if result.cache:
        _print_cache(result, console)
    if result.usage is not None:
        console.print(Rule(f"cached tokens reported by {result.model}"))
        u = result.usage
        console.print(
            Text(
                f"{u['requests']} responses with usage: {u['input_tokens']:,} input tokens, {u['cache_read']:,} read "
                f"from cache ({u['cached_share']:.1%}), {u['cache_write']:,} written to cache"
            )
        )
    console.print(Text(f"done in {result.seconds:.1f}s", style="dim"))


def _print_cache(result: DemoResult, console: Any) -> None:
    from rich.rule import Rule
    from rich.table import Table

    console.print(Rule("prefix cache over the demo's recorded requests (simulated)"))
    cache = Table(
        title=f"requests {REQUEST_GAP_S:g}s apart, sessions {SESSION_GAP_S:g}s apart", title_justify="left"
    )
    for column in ("policy", "input tokens", "cached", "cached share", "input cost", "without cache"):
        cache.add_column(column, justify="left" if column == "policy" else "right")
    for row in result.cache:
        cache.add_row(
            row["policy"],
            f"{row['input_tokens']:,}",
            f"{row['cached_tokens']:,}",
            f"{row['cached_share']:.1%}",
            f"${row['cost_usd']:.5f}",
            f"${row['cost_without_cache_usd']:.5f}",
        )
    console.print(cache)
    per = Table(title="cached tokens per request", title_justify="left")
    per.add_column("request")
    per.add_column("session")
    per.add_column("tokens", justify="right")
    for row in result.cache:
        per.add_column(row["policy"], justify="right")
    for i, request in enumerate(result.requests):
        tokens = result.cache[0]["per_request"][i]["tokens"] if result.cache else 0
        per.add_row(
            str(request.number),
            str(request.session),
            f"{tokens:,}",
            *[f"{row['per_request'][i]['cached']:,}" for row in result.cache],
        )
    console.print(per)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def print_token_report(report: Any, console: Any) -> None:
    """Render a :class:`~ironmem.analysis.tokens.TokenReport` as rich tables."""
    from rich.table import Table
    from rich.text import Text

    summary = Table(title=f"memory cost in tokens ({report.encoding})", title_justify="left")
    summary.add_column("item")
    summary.add_column("tokens", justify="right")
    summary.add_row("fence overhead (tags + system note)", f"{report.fence_overhead:,}")
    summary.add_row(f"frozen snapshot ({report.snapshot_chars:,} chars)", f"{report.snapshot:,}")
    recall = "-" if report.last_recall is None else f"{report.last_recall:,}"
    summary.add_row("last recall (fenced)", recall)
    console.print(summary)
    tools = Table(title="memory tool schemas as sent", title_justify="left")
    tools.add_column("tool")
    tools.add_column("provider")
    tools.add_column("OpenAI", justify="right")
    tools.add_column("Anthropic", justify="right")
    for t in report.tools:
        tools.add_row(t.name, t.provider, f"{t.openai:,}", f"{t.anthropic:,}")
    tools.add_row(
        Text("tools array", style="bold"), "", f"{report.tools_openai:,}", f"{report.tools_anthropic:,}"
    )
    console.print(tools)
    if report.what_if:
        what_if = Table(
            title=f"if N external providers were allowed ({report.what_if_source})", title_justify="left"
        )
        for column in ("N", "tools", "OpenAI", "Anthropic", "rule 1"):
            what_if.add_column(column, justify="right" if column != "rule 1" else "left")
        for row in report.what_if:
            verdict = Text("allowed", style="green") if row.allowed else Text("refused", style="red")
            what_if.add_row(
                str(row.external_providers), str(row.tools), f"{row.openai:,}", f"{row.anthropic:,}", verdict
            )
        console.print(what_if)
    elif report.what_if_source:
        console.print(Text(f"what-if table: {report.what_if_source}", style="dim"))


# --------------------------------------------------------------------------------------------------
# run_simulation (ironmem simulate)
# --------------------------------------------------------------------------------------------------
def run_simulation(
    turns: int = 30,
    write_every: int = 5,
    policies: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Replay a scripted ``turns``-turn session (a memory write every ``write_every`` turns, 0 = never) under
    each strategy and policy. ``progress`` is a rich Console to show a progress bar on, or None.

    Returns one row per (policy, strategy): requests, input tokens, cached share, cost, savings and the share of
    the theoretical maximum of cached tokens reached.
    """
    from .analysis.replay import STRATEGIES, record_session, replay
    from .analysis.tokens import TokenCounter

    specs = list(policies or DEMO_POLICIES)
    chosen = list(strategies or STRATEGIES)
    for s in chosen:
        if s not in STRATEGIES:
            raise DemoError(f"unknown strategy {s!r}; use {', '.join(STRATEGIES)}")
    parsed = [(spec, parse_policy(spec)) for spec in specs]  # fail on a bad policy before any work
    counter = TokenCounter()
    script = record_session(turns=turns, write_every=write_every if write_every else turns + 1)
    rows: list[dict[str, Any]] = []

    def work(advance: Callable[[], None]) -> None:
        for spec, _ in parsed:
            for strategy in chosen:
                result = replay(script, functools.partial(parse_policy, spec), counter, strategies=[strategy])[
                    strategy
                ]
                rows.append(
                    {
                        "policy": spec,
                        "describe": result.policy,
                        "strategy": strategy,
                        "requests": result.requests,
                        "input_tokens": result.input_tokens,
                        "cached_tokens": result.cached_tokens,
                        "cache_write_tokens": result.cache_write_tokens,
                        "cached_share": result.cached_share,
                        "cost_usd": result.cost_usd,
                        "cost_without_cache_usd": result.cost_without_cache_usd,
                        "savings": 1 - result.cost_usd / result.cost_without_cache_usd
                        if result.cost_without_cache_usd
                        else 0.0,
                        "theoretical_cached_tokens": result.theoretical_cached_tokens,
                        "of_theoretical_max": result.achieved_ratio
                        if result.theoretical_cached_tokens
                        else None,
                    }
                )
                advance()

    if progress is None:
        work(lambda: None)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(
            TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), console=progress, transient=True
        ) as bar:
            task = bar.add_task("replay", total=len(parsed) * len(chosen))
            work(lambda: bar.advance(task))
    return rows
