"""The demo run through LlamaIndex: ``FunctionAgent`` with :class:`~ironmem.adapters.llama_index.IronMemory`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..core.manager import MemoryManager
from .records import DemoRequest, DemoTurn
from .script import SCRIPT, ScriptTurn, ToolStep, View


def scripted_steps(turns: Sequence[ScriptTurn]) -> list[Any]:
    from ..testing.llama_index import ScriptedToolCall

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


def run_llama_index(manager: MemoryManager, tag: str) -> tuple[list[DemoRequest], list[DemoTurn]]:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.agent.workflow.workflow_events import ToolCallResult
    from llama_index.core.tools import FunctionTool

    from ..adapters.llama_index import IronMemory
    from ..analysis.replay import APP_TOOLS, BASE_SYSTEM_PROMPT
    from ..testing.llama_index import ScriptedFunctionCallingLLM

    llm = ScriptedFunctionCallingLLM(scripted_steps(SCRIPT))

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


