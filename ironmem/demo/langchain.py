"""The demo run through LangChain: ``create_agent`` with :class:`~ironmem.adapters.langchain.IronMemoryMiddleware`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..core.manager import MemoryManager
from ..core.provider import ToolSchema
from .models import real_model
from .records import DemoRequest, DemoTurn
from .script import SCRIPT, ScriptTurn, ToolStep, View


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


def scripted_steps(turns: Sequence[ScriptTurn]) -> list[Any]:
    from langchain_core.messages import AIMessage

    from ..testing.langchain import ScriptedChatModel

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


def run_langchain(
    manager: MemoryManager, model: str | None, tag: str, chat_model: Any = None
) -> tuple[list[DemoRequest], list[DemoTurn], Any]:
    from langchain.agents import create_agent
    from langchain.agents.middleware.types import AgentMiddleware
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.checkpoint.memory import InMemorySaver

    from ..adapters.langchain import IronMemoryMiddleware
    from ..analysis.replay import APP_TOOLS, BASE_SYSTEM_PROMPT
    from ..analysis.usage import UsageMeter
    from ..testing.langchain import ScriptedChatModel

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
        chat_model = real_model(model) if model is not None else ScriptedChatModel(scripted_steps(SCRIPT))
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


