"""ScriptedChatModel: the offline tool-calling chat model used by the LangChain tests and the demo."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool

from ironmem.testing.langchain import ScriptedChatModel, ScriptExhaustedError


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_plays_script_and_records_requests() -> None:
    seen: list[list[BaseMessage]] = []

    def echo(messages: list[BaseMessage]) -> str:
        seen.append(messages)
        return f"you said: {messages[-1].text}"

    model = ScriptedChatModel([ScriptedChatModel.tool_call("add", {"a": 1, "b": 2}, call_id="c1"), echo])
    bound = model.bind_tools([add], tool_choice="auto")
    first = bound.invoke([SystemMessage("sys"), HumanMessage("add 1 and 2")])
    assert first.tool_calls == [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}]
    second = bound.invoke([HumanMessage("thanks")])
    assert second.content == "you said: thanks" and seen[0][-1].text == "thanks"
    requests = model.requests
    assert [r.tool_names for r in requests] == [["add"], ["add"]]
    assert requests[0].tools[0]["function"]["parameters"]["required"] == ["a", "b"]
    assert requests[0].tool_choice == "auto"
    assert requests[0].system_text == "sys" and requests[1].system_text == ""
    assert requests[0].serialized()[1]["data"]["content"] == "add 1 and 2"
    with pytest.raises(ScriptExhaustedError, match="2 steps"):
        bound.invoke([HumanMessage("more")])


def test_recorded_messages_are_copies() -> None:
    model = ScriptedChatModel(["ok"])
    message = HumanMessage("original")
    model.invoke([message])
    message.content = "changed later"
    assert model.requests[0].messages[0].content == "original"


def test_async_steps_and_usage_metadata() -> None:
    async def later(messages: list[BaseMessage]) -> AIMessage:
        await asyncio.sleep(0)
        return AIMessage(f"{len(messages)} messages")

    def usage(request: Any) -> dict[str, Any]:
        n = len(request.text())
        return {"input_tokens": n, "output_tokens": 2, "total_tokens": n + 2,
                "input_token_details": {"cache_read": 0}}

    model = ScriptedChatModel([later, "plain"], usage_metadata=usage)
    reply = asyncio.run(model.ainvoke([HumanMessage("hello"), HumanMessage("world")]))
    assert reply.content == "2 messages"
    assert reply.usage_metadata == {"input_tokens": 11, "output_tokens": 2, "total_tokens": 13,
                                    "input_token_details": {"cache_read": 0}}
    assert model.requests[0].via == "async"
    assert model.invoke("x").content == "plain" and model.requests[1].via == "sync"
    model.reset(["again"])
    assert model.calls == 0 and model.invoke("y").content == "again"


def test_async_step_in_sync_call_is_a_clear_error() -> None:
    async def step(messages: list[BaseMessage]) -> str:
        return "never"

    with pytest.raises(TypeError, match="ainvoke"):
        ScriptedChatModel([step]).invoke("hi")


def test_repeat_last() -> None:
    model = ScriptedChatModel(["same"], repeat_last=True)
    assert [model.invoke("q").content for _ in range(3)] == ["same"] * 3
