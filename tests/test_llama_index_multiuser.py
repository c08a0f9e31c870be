"""Two users of LlamaIndex agents over one memory home, two sessions each: no text of one user reaches any
request of the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent
from multiuser_scenario import PRIVATE, TURNS, facts, other, shares_agent_notes

from ironmem import MemoryManager
from ironmem.adapters.llama_index import IronMemory
from ironmem.core.errors import SessionOwnerError
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM, tool_call


def script() -> list[Any]:
    steps: list[Any] = []
    for turn in TURNS:
        fact, note = facts(turn.user)
        if turn.text.startswith("I own"):
            steps += [tool_call("memory", {"action": "add", "target": "user", "content": fact}),
                      tool_call("memory", {"action": "add", "target": "memory", "content": note}),
                      "Saved both."]
        elif "Search our past chats" in turn.text:
            steps += [tool_call("session_search", {"query": "project ships"}), "Found it."]
        else:
            steps.append("Here is what I know.")
    return steps


def request_text(request: Any) -> str:
    return json.dumps([m.model_dump(mode="json") for m in request.messages], ensure_ascii=False)


async def test_two_users_two_sessions_each_no_cross_user_text(home: Path, tmp_path: Path) -> None:
    manager = MemoryManager(home)
    if shares_agent_notes(manager):
        pytest.xfail("needs the core default of issue 35 item 1: MEMORY.md per user when user ids are in use")
    llm = ScriptedFunctionCallingLLM(script())
    memories: dict[str, IronMemory] = {}
    sent: dict[str, list[str]] = {"ada": [], "bob": []}
    by_thread: dict[str, list[str]] = {}
    for turn in TURNS:
        memory = memories.get(turn.thread)
        if memory is None:
            memory = memories[turn.thread] = IronMemory.from_defaults(
                manager, session_id=turn.thread, user_id=turn.user, history_path=tmp_path / "chat.db")
        agent = FunctionAgent(llm=llm, tools=memory.tools(), system_prompt="Be brief.")
        start = llm.calls
        await agent.run(user_msg=turn.text, memory=memory)
        texts = [request_text(r) for r in llm.requests[start:]]
        sent[turn.user] += texts
        by_thread.setdefault(turn.thread, []).extend(texts)

    for user in ("ada", "bob"):
        requests = sent[user]
        assert len(requests) >= 6
        for word in PRIVATE[other(user)]:
            leaked = [i for i, text in enumerate(requests) if word in text]
            assert not leaked, f"{other(user)}'s {word!r} reached {user}'s requests {leaked}"
        fact, note = facts(user)
        first_request_of_thread_2 = by_thread[f"{user}-2"][0]
        assert fact in first_request_of_thread_2 and note in first_request_of_thread_2  # in session 2's snapshot
        assert [t for t in by_thread[f"{user}-2"] if "session_search" in t and PRIVATE[user][1] in t]

    # Bob opening Ada's session: refused, nothing of Ada's read or written.
    with pytest.raises(SessionOwnerError):
        IronMemory.from_defaults(manager, session_id="ada-1", user_id="bob", history_path=tmp_path / "chat.db")
    assert manager.builtin.state("user", "ada").entries == (facts("ada")[0],)
    for memory in memories.values():
        await memory.aclose()
    # ... also once every memory is closed: the owner is kept beside the persistent history.
    with pytest.raises(SessionOwnerError):
        IronMemory.from_defaults(manager, session_id="ada-1", user_id="bob", history_path=tmp_path / "chat.db")
    manager.close()
