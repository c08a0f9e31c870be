"""What a LangChain expert expects of IronMemoryMiddleware (issue 35, items 1 and 3): a thread that changes user is
refused, a removed fact is superseded in the fence that follows, and the docs say exactly what the checkpoints
hold."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.langchain import IronMemoryMiddleware, IronMemoryToolkit
from ironmem.core.errors import SessionOwnerError
from ironmem.testing.langchain import ScriptedChatModel, ScriptedRequest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "langchain.md"


def run(agent: Any, thread: str, text: str, user: str | None = None) -> dict[str, Any]:
    context = {"user_id": user} if user else None
    return agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}},
                        context=context)


def last_human(request: ScriptedRequest) -> str:
    return [m for m in request.messages if isinstance(m, HumanMessage)][-1].text


# -- item 1: one thread, one user --------------------------------------------------------------------------
def test_a_thread_reused_by_another_user_is_refused(manager: MemoryManager) -> None:
    model = ScriptedChatModel([
        ScriptedChatModel.tool_call("memory", {"action": "add", "target": "user", "content": "Ada keeps bees"}),
        "Noted.",
        "Hello again, Ada.",
    ])
    saver = InMemorySaver()
    middleware = IronMemoryMiddleware(manager)
    agent = create_agent(model, middleware=[middleware], checkpointer=saver)
    run(agent, "t-1", "I keep bees.", user="ada")
    ada_profile = manager.builtin.state("user", "ada").entries
    calls = model.calls
    with pytest.raises(SessionOwnerError, match="thread 't-1' was started by user 'ada'.*'bob'"):
        run(agent, "t-1", "I keep wasps, remember that.", user="bob")
    assert model.calls == calls  # the model never saw Ada's thread as Bob
    assert manager.builtin.state("user", "ada").entries == ada_profile
    assert not manager.builtin.state("user", "bob").entries
    kept = [m.text for m in agent.get_state({"configurable": {"thread_id": "t-1"}}).values["messages"]]
    assert "I keep wasps, remember that." not in kept and kept[-1] == "Noted."  # Bob's words left Ada's thread
    run(agent, "t-1", "Hi!")  # no user id given: the thread goes on as its owner
    assert middleware.sessions["t-1"].user_id == "ada"

    # A new middleware (as in a new process, resuming from the checkpointer) refuses too: the owner is checkpointed.
    fresh = IronMemoryMiddleware(manager)
    other = create_agent(ScriptedChatModel(["never"]), middleware=[fresh], checkpointer=saver)
    with pytest.raises(SessionOwnerError):
        run(other, "t-1", "hello", user="bob")
    assert fresh.sessions == {}


def test_toolkit_tool_on_another_users_thread_answers_with_a_json_error(manager: MemoryManager) -> None:
    toolkit = IronMemoryToolkit(manager)
    memory = toolkit.get_tools()[0]
    ada = {"configurable": {"thread_id": "x", "user_id": "ada"}}
    bob = {"configurable": {"thread_id": "x", "user_id": "bob"}}
    add = {"action": "add", "target": "user", "content": "Likes tea"}
    assert json.loads(memory.invoke(add, ada))["success"] is True
    refused = json.loads(memory.invoke({**add, "content": "Likes coffee"}, bob))
    assert refused["success"] is False and "started by user 'ada'" in refused["error"]
    assert list(manager.builtin.state("user", "ada").entries) == ["Likes tea"]
    assert not manager.builtin.state("user", "bob").entries


# -- item 3: a fact removed mid-thread ------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["user", "memory"])
def test_a_removed_fact_is_superseded_after_its_replayed_fence(manager: MemoryManager, target: str) -> None:
    """Replayed fences stay byte-exact (the cache), and the next fence says the fact is no longer true."""
    model = ScriptedChatModel([
        ScriptedChatModel.tool_call("memory", {"action": "add", "target": target, "content": "Lives in Lyon"}),
        "Noted.",
        ScriptedChatModel.tool_call("memory", {"action": "remove", "target": target, "old_text": "Lyon"}),
        "Removed: you moved.",
        "Here are some tips.",
    ])
    agent = create_agent(model, middleware=[IronMemoryMiddleware(manager)], checkpointer=InMemorySaver())
    run(agent, "moving", "I live in Lyon.")
    run(agent, "moving", "Actually I moved away, forget Lyon.")
    run(agent, "moving", "Any tips for settling in?")
    requests = model.requests
    label = "user profile" if target == "user" else "memory"
    second_turn = last_human(requests[2])
    assert f"[{label}] Lives in Lyon" in second_turn  # shown in turn 2's fence (live delta)
    last = requests[-1]
    humans = [m.text for m in last.messages if isinstance(m, HumanMessage)]
    assert humans[1] == second_turn  # replayed byte for byte
    prev = requests[-2].serialized()
    assert last.serialized()[: len(prev)] == prev  # so the request still extends the previous one
    assert humans[-1].startswith(FENCE_OPEN)
    assert f"[{label}, removed - no longer true] Lives in Lyon" in humans[-1]  # and is superseded after it


# -- item 3: what the checkpoints hold, as the docs say ------------------------------------------------------
def test_checkpoint_holds_exactly_the_documented_private_keys(manager: MemoryManager) -> None:
    manager.start_session("past").sync_turn("My sourdough starter is called Clint.", "Nice name.")
    saver = InMemorySaver()
    agent = create_agent(ScriptedChatModel(["Clint is fine."]), middleware=[IronMemoryMiddleware(manager)],
                         checkpointer=saver)
    config = {"configurable": {"thread_id": "ck"}}
    agent.invoke({"messages": [("user", "How is my sourdough starter?")]}, config)
    channels = saver.get(config)["channel_values"]  # type: ignore[index]
    stored = {key for key in channels if key.startswith("ironmem_")}
    documented = set(re.findall(r"`(ironmem_\w+)`", DOCS.read_text()))
    assert stored and stored <= documented
    assert "ironmem_recalls" in stored  # the recalled text is stored (unfenced), as the docs say
    assert "Clint" in json.dumps(channels["ironmem_recalls"])
    assert FENCE_OPEN not in json.dumps(channels["ironmem_recalls"])
    assert all(FENCE_OPEN not in m.text for m in channels["messages"])  # messages never hold a fence


def test_a_fact_removed_while_the_thread_was_away_is_superseded(home: Path) -> None:
    """Resumed from its checkpoint by a new manager and middleware (as in a new process): the replayed fence still
    shows the entry, and the next fence says it was removed meanwhile."""
    saver = InMemorySaver()
    with MemoryManager(home) as manager:
        model = ScriptedChatModel([
            ScriptedChatModel.tool_call("memory", {"action": "add", "target": "user", "content": "Lives in Lyon"}),
            "Noted.",
            "A walk by the Saone?",
        ])
        middleware = IronMemoryMiddleware(manager)
        run(create_agent(model, middleware=[middleware], checkpointer=saver), "away", "I live in Lyon.")
        run(create_agent(model, middleware=[middleware], checkpointer=saver), "away", "Plan my weekend.")
        assert "[user profile] Lives in Lyon" in last_human(model.requests[-1])
        middleware.close()
    with MemoryManager(home) as manager:
        manager.start_session("cleanup").handle_tool_call(
            "memory", {"action": "remove", "target": "user", "old_text": "Lyon"})
        model = ScriptedChatModel(["You did not say."])
        middleware = IronMemoryMiddleware(manager)
        run(create_agent(model, middleware=[middleware], checkpointer=saver), "away", "Where do I live?")
        humans = [m.text for m in model.requests[0].messages if isinstance(m, HumanMessage)]
        assert "[user profile] Lives in Lyon" in humans[1]  # turn 2's fence, replayed as it was
        assert "[user profile, removed - no longer true] Lives in Lyon" in humans[-1]
        middleware.close()
