"""Two users of one LangChain agent, two threads each: no text of one user reaches any request of the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from multiuser_scenario import PRIVATE, TURNS, facts, other, shares_agent_notes

from ironmem import MemoryManager
from ironmem.adapters.langchain import IronMemoryMiddleware
from ironmem.core.errors import SessionOwnerError
from ironmem.testing.langchain import ScriptedChatModel


def script() -> list[Any]:
    steps: list[Any] = []
    for turn in TURNS:
        fact, note = facts(turn.user)
        if turn.text.startswith("I own"):
            steps += [ScriptedChatModel.tool_call("memory", {"action": "add", "target": "user", "content": fact}),
                      ScriptedChatModel.tool_call("memory", {"action": "add", "target": "memory", "content": note}),
                      "Saved both."]
        elif "Search our past chats" in turn.text:
            steps += [ScriptedChatModel.tool_call("session_search", {"query": "project ships"}), "Found it."]
        else:
            steps.append("Here is what I know.")
    return steps


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_two_users_two_threads_each_no_cross_user_text(home: Path, mode: str) -> None:
    manager = MemoryManager(home)
    if shares_agent_notes(manager):
        pytest.xfail("needs the core default of issue 35 item 1: MEMORY.md per user when user ids are in use")
    model = ScriptedChatModel(script())
    middleware = IronMemoryMiddleware(manager)
    agent = create_agent(model, system_prompt="Be brief.", middleware=[middleware], checkpointer=InMemorySaver())
    sent: dict[str, list[str]] = {"ada": [], "bob": []}
    by_thread: dict[str, list[str]] = {}
    for turn in TURNS:
        start = model.calls
        payload = {"messages": [HumanMessage(turn.text)]}
        config = {"configurable": {"thread_id": turn.thread}}
        if mode == "async":
            await agent.ainvoke(payload, config, context={"user_id": turn.user})
        else:
            agent.invoke(payload, config, context={"user_id": turn.user})
        texts = [json.dumps(r.serialized(), ensure_ascii=False) for r in model.requests[start:]]
        sent[turn.user] += texts
        by_thread.setdefault(turn.thread, []).extend(texts)

    for user in ("ada", "bob"):
        requests = sent[user]
        assert len(requests) >= 6
        for word in PRIVATE[other(user)]:
            leaked = [i for i, text in enumerate(requests) if word in text]
            assert not leaked, f"{other(user)}'s {word!r} reached {user}'s requests {leaked}"
        # Not vacuous: each user's own notes and facts did come back to them.
        fact, note = facts(user)
        first_request_of_thread_2 = by_thread[f"{user}-2"][0]
        assert fact in first_request_of_thread_2 and note in first_request_of_thread_2  # in thread 2's snapshot
        found = [t for t in by_thread[f"{user}-2"] if "session_search" in t and PRIVATE[user][1] in t]
        assert found  # the search of past chats found the user's own project
    assert manager.builtin.state("memory", manager.scopes_for("ada")["memory"]).entries == (facts("ada")[1],)
    assert manager.builtin.state("user", "bob").entries == (facts("bob")[0],)

    # Bob on Ada's thread: refused before anything reaches the model or the files.
    calls = model.calls
    with pytest.raises(SessionOwnerError):
        agent.invoke({"messages": [HumanMessage("I own a canoe.")]}, {"configurable": {"thread_id": "ada-1"}},
                     context={"user_id": "bob"})
    assert model.calls == calls
    assert manager.builtin.state("user", "ada").entries == (facts("ada")[0],)
    middleware.close()
    manager.close()


@pytest.mark.parametrize(("per_user", "says"), [(True, "private to the current user"), (False, "SHARED")])
def test_a_middleware_for_one_user_tells_the_model_whether_its_notes_are_shared(
    home: Path, per_user: bool, says: str,
) -> None:
    """The memory tool a real agent sends to the model says what the session's own tool says."""
    manager = MemoryManager(home=home, memory_per_user=per_user)
    middleware = IronMemoryMiddleware(manager, user_id="ada")
    model = ScriptedChatModel(["Noted."])
    agent = create_agent(model=model, tools=[], middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("hello")]})
    (sent,) = [t["function"]["description"] for t in model.requests[0].tools if t["function"]["name"] == "memory"]
    (own,) = [t.description for t in manager.start_session(user_id="ada").tool_schemas() if t.name == "memory"]
    assert says in sent and sent == own
    manager.close()
