"""Real LlamaIndex agent loops with IronMemory: FunctionAgent (awaited, streamed), ReActAgent, Context reuse.

Each scenario runs two sessions of several turns against one memory home, with a memory write in the middle of
the first session, and checks the three rules on the requests the (scripted) model actually received.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import (
    AgentStream,
    FunctionAgent,
    ReActAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.llama_index import IronMemory
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM, ScriptedRequest, tool_call

SYSTEM_PROMPT = "You are a concise travel assistant."
PASSPORT = "Passport expires in May"


def _shape(message: ChatMessage) -> tuple[Any, ...]:
    return (
        message.role.value,
        message.content,
        json.dumps(message.additional_kwargs.get("tool_calls"), sort_keys=True),
    )


def assert_prefix_chain(requests: list[ScriptedRequest]) -> None:
    """Every request starts with the whole previous request: the provider's prefix cache keeps hitting."""
    for earlier, later in zip(requests, requests[1:], strict=False):
        before = [_shape(m) for m in earlier.messages]
        assert [_shape(m) for m in later.messages][: len(before)] == before


def assert_stored_history_is_clean(memory: IronMemory) -> None:
    stored = memory.get_all()
    assert stored, "the history should not be empty"
    assert all(FENCE_OPEN not in (m.content or "") for m in stored)
    assert all(m.role.value != "system" for m in stored)  # the snapshot is never stored either


def turn_texts(memory: IronMemory, query: str) -> list[str]:
    result = json.loads(memory.session.handle_tool_call("session_search", {"query": query, "limit": 20}))
    return [hit["text"] for hit in result["results"] if hit["kind"] == "turn"]


async def run_turn(
    agent: Any, text: str, memory: IronMemory | None, *, ctx: Context | None = None, streaming: bool = False
) -> tuple[str, list[Any]]:
    kwargs: dict[str, Any] = {"user_msg": text}
    if memory is not None:
        kwargs["memory"] = memory
    if ctx is not None:
        kwargs["ctx"] = ctx
    handler = agent.run(**kwargs)
    events: list[Any] = []
    if streaming:
        async for event in handler.stream_events():
            events.append(event)
    result = await handler
    return str(result), events


# --------------------------------------------------------------------------------------------------
# FunctionAgent
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("streaming", [False, True], ids=["awaited", "streamed"])
async def test_function_agent_two_sessions(manager: MemoryManager, streaming: bool) -> None:
    # ---- session 1: three turns, the second one writes memory --------------------------------------
    one = IronMemory.from_defaults(manager=manager, session_id="trip-1")
    llm = ScriptedFunctionCallingLLM(
        [
            "Lisbon in spring is lovely.",
            tool_call("memory", {"action": "add", "target": "user", "content": PASSPORT}),
            "Saved: your passport expires in May.",
            lambda request: (
                "Renew your passport first." if PASSPORT in request.messages[-1].content else "No idea."
            ),
        ]
    )
    agent = FunctionAgent(tools=one.tools(), llm=llm, system_prompt=SYSTEM_PROMPT, streaming=streaming)

    answer, _ = await run_turn(agent, "I'm planning a trip to Lisbon", one, streaming=streaming)
    assert answer == "Lisbon in spring is lovely."
    answer, events = await run_turn(
        agent, "Remember that my passport expires in May", one, streaming=streaming
    )
    assert answer == "Saved: your passport expires in May."
    answer, _ = await run_turn(agent, "What should I check before booking?", one, streaming=streaming)
    assert answer == "Renew your passport first."  # the model saw the write in this turn's fence

    requests = llm.requests
    assert len(requests) == 4
    assert {r.kind for r in requests} == {"stream_chat" if streaming else "chat"}
    # rule 3: the same snapshot bytes in every request of the session
    for request in requests:
        assert request.system_texts == [SYSTEM_PROMPT, one.snapshot]
    assert PASSPORT not in one.snapshot
    # the write shows in the NEXT turn's fence (the live delta), before a copy of the user message
    last_user = requests[3].messages[-1].content
    assert last_user.startswith(FENCE_OPEN) and f"[user profile] {PASSPORT}" in last_user
    assert last_user.endswith("What should I check before booking?")
    assert_prefix_chain(requests)
    assert_stored_history_is_clean(one)
    assert one.session.prefetch_count == 3  # one per user turn, although the agent called get() more often
    assert one.session.turns_synced == 3
    assert (
        "User: Remember that my passport expires in May\nAssistant: Saved: your passport expires in May."
        in (turn_texts(one, "passport"))
    )
    if streaming:
        deltas = "".join(e.delta for e in events if isinstance(e, AgentStream))
        assert "Saved: your passport expires in May." in deltas
        calls = [e for e in events if isinstance(e, ToolCall) and not isinstance(e, ToolCallResult)]
        results = [e for e in events if isinstance(e, ToolCallResult)]
        assert [c.tool_name for c in calls] == ["memory"]
        assert json.loads(results[0].tool_output.content)["success"] is True

    # ---- session 2: the write is in the snapshot; session 1 is recalled ------------------------------
    two = IronMemory.from_defaults(manager=manager, session_id="trip-2")
    llm2 = ScriptedFunctionCallingLLM(["You were planning Lisbon.", "Enjoy!"])
    agent2 = FunctionAgent(tools=two.tools(), llm=llm2, system_prompt=SYSTEM_PROMPT, streaming=streaming)
    await run_turn(agent2, "What about my Lisbon trip?", two, streaming=streaming)
    await run_turn(agent2, "Thanks, bye", two, streaming=streaming)
    assert PASSPORT in two.snapshot
    for request in llm2.requests:
        assert request.system_texts == [SYSTEM_PROMPT, two.snapshot]
    first = llm2.requests[0].messages[-1].content
    assert (
        first.startswith(FENCE_OPEN) and "I'm planning a trip to Lisbon" in first
    )  # from past conversations
    assert_prefix_chain(llm2.requests)
    assert_stored_history_is_clean(two)
    assert (two.session.prefetch_count, two.session.turns_synced) == (2, 2)
    assert len(turn_texts(two, "Lisbon")) == 2  # a turn of each session
    await one.aclose()
    await two.aclose()


# --------------------------------------------------------------------------------------------------
# ReActAgent
# --------------------------------------------------------------------------------------------------
def react(thought: str, action: str, args: dict[str, Any]) -> str:
    return f"Thought: {thought}\nAction: {action}\nAction Input: {json.dumps(args)}"


def answer(text: str) -> str:
    return f"Thought: I can answer without using any more tools.\nAnswer: {text}"


async def test_react_agent_two_sessions(manager: MemoryManager) -> None:
    one = IronMemory.from_defaults(manager=manager, session_id="react-1")
    llm = ScriptedFunctionCallingLLM(
        [
            answer("Hello! How can I help?"),
            react(
                "The user wants this remembered.",
                "memory",
                {"action": "add", "target": "user", "content": PASSPORT},
            ),
            answer("Saved."),
            answer("Check your passport date."),
        ]
    )
    # ReActAgent folds its system_prompt into the ReAct header and drops the first system message it gets;
    # with a system_prompt of its own, the memory's snapshot message is kept.
    agent = ReActAgent(tools=one.tools(), llm=llm, system_prompt=SYSTEM_PROMPT, streaming=False)
    await run_turn(agent, "Hi there", one)
    assert await run_turn(agent, "Remember my passport expires in May", one) == ("Saved.", [])
    await run_turn(agent, "Anything to check before my trip?", one)

    requests = llm.requests
    assert len(requests) == 4
    for request in requests:
        # [ReAct header, snapshot, history...]
        assert request.messages[1].role.value == "system" and request.messages[1].content == one.snapshot
    assert PASSPORT not in one.snapshot
    last_user = [m for m in requests[3].messages if m.role.value == "user"][-1].content
    assert last_user.startswith(FENCE_OPEN) and PASSPORT in last_user
    assert_stored_history_is_clean(one)
    assert (one.session.prefetch_count, one.session.turns_synced) == (3, 3)
    # the synced turn holds the final answer, not the ReAct trace
    assert "User: Remember my passport expires in May\nAssistant: Saved." in turn_texts(one, "passport")
    assert all("Thought:" not in t for t in turn_texts(one, "passport"))

    two = IronMemory.from_defaults(manager=manager, session_id="react-2")
    llm2 = ScriptedFunctionCallingLLM([answer("It expires in May.")])
    agent2 = ReActAgent(tools=two.tools(), llm=llm2, system_prompt=SYSTEM_PROMPT, streaming=False)
    await run_turn(agent2, "When does my passport expire?", two)
    assert PASSPORT in two.snapshot and llm2.requests[0].messages[1].content == two.snapshot
    assert (two.session.prefetch_count, two.session.turns_synced) == (1, 1)
    await one.aclose()
    await two.aclose()


# --------------------------------------------------------------------------------------------------
# Workflow behaviour: Context reuse, edit_state from a tool, Context serialization
# --------------------------------------------------------------------------------------------------
async def test_context_reuse_and_edit_state_keep_one_memory(manager: MemoryManager) -> None:
    mem = IronMemory.from_defaults(manager=manager, session_id="ctx-1")

    async def set_city(ctx: Context, city: str) -> str:
        """Record the city the user is travelling to."""
        async with ctx.store.edit_state() as state:  # workflows copy the state here, memory included
            state["city"] = city
        return f"city set to {city}"

    # this module uses postponed annotations; LlamaIndex finds the Context parameter by its real type
    set_city.__annotations__ = {"ctx": Context, "city": str, "return": str}
    city_tool = FunctionTool.from_defaults(async_fn=set_city, description="Record the destination city.")
    llm = ScriptedFunctionCallingLLM(
        [
            tool_call("set_city", {"city": "Lisbon"}),
            "Lisbon it is.",
            tool_call("memory", {"action": "add", "target": "memory", "content": "Trip city: Lisbon"}),
            "Noted in memory.",
            "You are going to Lisbon.",
            "Still Lisbon.",
        ]
    )
    agent = FunctionAgent(tools=[city_tool, *mem.tools()], llm=llm, streaming=False)
    ctx = Context(agent)

    await run_turn(agent, "I'm going to Lisbon", mem, ctx=ctx)
    await run_turn(agent, "Save the city to memory", None, ctx=ctx)  # no memory= : the Context's one is used
    await run_turn(agent, "Where am I going?", mem, ctx=ctx)  # memory= again: still one memory

    stored: IronMemory = await ctx.store.get("memory")
    assert (
        stored.memory_id == mem.memory_id and stored.session is mem.session and stored.history is mem.history
    )
    assert await ctx.store.get("city") == "Lisbon"
    contents = [m.content for m in mem.get_all() if m.role.value == "user"]
    assert contents == ["I'm going to Lisbon", "Save the city to memory", "Where am I going?"]
    assert (mem.session.prefetch_count, mem.session.turns_synced) == (3, 3)
    assert "Trip city: Lisbon" in llm.requests[4].messages[-1].content  # the write, in the next turn's fence
    for request in llm.requests:
        assert request.system_texts == [mem.snapshot]
    assert_prefix_chain(llm.requests)
    assert_stored_history_is_clean(mem)

    # serialize the Context (as an app would between requests) and continue from it
    data = json.loads(json.dumps(ctx.to_dict()))
    restored = Context.from_dict(agent, data)
    await run_turn(agent, "Confirm the city?", None, ctx=restored)
    assert [m.content for m in mem.get_all() if m.role.value == "user"][-1] == "Confirm the city?"
    assert (mem.session.prefetch_count, mem.session.turns_synced) == (4, 4)
    assert (await restored.store.get("memory")).session is mem.session
    await mem.aclose()
    with pytest.raises(RuntimeError, match="IronMemory is closed"):
        await mem.aget()
