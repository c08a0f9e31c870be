"""IronMemoryMiddleware in real ``create_agent`` loops (LangGraph, InMemorySaver / SqliteSaver, sync and async)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.langchain import IronMemoryMiddleware
from ironmem.testing.langchain import ScriptedChatModel, ScriptedRequest

SYSTEM_PROMPT = "You are a concise assistant."
FENCE_BYTES = FENCE_OPEN.encode()


def tool_call(name: str, args: dict[str, Any]) -> AIMessage:
    return ScriptedChatModel.tool_call(name, args)


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def make_runner(agent: Any, mode: str) -> Callable[[str, str], dict[str, Any]]:
    """One user turn on ``thread``, through ``invoke`` or ``ainvoke``."""

    def run(thread: str, text: str) -> dict[str, Any]:
        payload = {"messages": [HumanMessage(text)]}
        if mode == "async":
            return asyncio.run(agent.ainvoke(payload, config(thread)))
        return agent.invoke(payload, config(thread))

    return run


def all_bytes(obj: Any) -> Iterator[bytes]:
    """Every bytes / str leaf of a nested checkpointer storage structure, as bytes."""
    if isinstance(obj, bytes | bytearray):
        yield bytes(obj)
    elif isinstance(obj, str):
        yield obj.encode()
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from all_bytes(key)
            yield from all_bytes(value)
    elif isinstance(obj, list | tuple | set):
        for value in obj:
            yield from all_bytes(value)


def assert_extends(requests: list[ScriptedRequest]) -> None:
    """Each request's message list, as sent, starts with the previous request's (byte for byte)."""
    for before, after in zip(requests, requests[1:]):
        prev, cur = before.serialized(), after.serialized()
        assert len(cur) > len(prev)
        assert json.dumps(cur[: len(prev)], sort_keys=True) == json.dumps(prev, sort_keys=True)


def human_messages(request: ScriptedRequest) -> list[HumanMessage]:
    return [m for m in request.messages if isinstance(m, HumanMessage)]


# ------------------------------------------------------------------------------------------------------
# The main scenario: two threads, several turns, a memory write in the middle, sync and async.
# ------------------------------------------------------------------------------------------------------
A_TURNS = [
    "Hi! I'm Ada. This weekend I am planning a hiking trip in the Alps.",
    "Please remember that I prefer metric units.",
    "How long is a 10 mile hike in my units?",
    "Thanks!",
]
B_TURNS = ["What did I say about my hiking trip?", "Save a note for me."]


def scenario_script() -> list[Any]:
    return [
        "Sounds lovely, Ada.",                                                       # A1
        tool_call("memory", {"action": "add", "target": "user", "content": "Prefers metric units"}),  # A2
        "Saved.",
        "About 16 km.",                                                              # A3
        "You're welcome.",                                                           # A4
        tool_call("session_search", {"query": "hiking trip"}),                       # B1
        "You planned a hiking trip in the Alps.",
        tool_call("memory", {"action": "explode", "target": "user"}),                 # B2: bad arguments
        "Sorry, saving failed.",
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_threads_with_a_memory_write(manager: MemoryManager, mode: str) -> None:
    model = ScriptedChatModel(scenario_script())
    saver = InMemorySaver()
    middleware = IronMemoryMiddleware(manager)
    agent = create_agent(model, system_prompt=SYSTEM_PROMPT, middleware=[middleware], checkpointer=saver)
    run = make_runner(agent, mode)

    for text in A_TURNS:
        run("A", text)
    a_count = model.calls
    for text in B_TURNS:
        result = run("B", text)
    assert model.remaining == 0
    requests = model.requests
    a_requests, b_requests = requests[:a_count], requests[a_count:]
    assert (len(a_requests), len(b_requests)) == (5, 4)
    assert {r.via for r in requests} == {mode}

    # The model received exactly the core's memory tools on every request.
    expected_tools = [schema.to_openai() for schema in manager.tool_schemas()]
    for request in requests:
        assert request.tools == expected_tools

    # Rule 3: within a thread every request carried the same system prompt bytes; the user's prompt comes
    # first and the snapshot sits in a content block of its own.
    for thread_requests in (a_requests, b_requests):
        first = thread_requests[0].serialized()[0]
        assert all(r.serialized()[0] == first for r in thread_requests)
    a_system = a_requests[0].messages[0].content
    assert a_system[0] == {"type": "text", "text": SYSTEM_PROMPT}
    assert "Persistent memory" in a_system[-1]["text"]
    assert "Prefers metric units" not in a_requests[-1].system_text  # frozen although the write landed
    # ... and the write shows in the next thread's snapshot.
    assert "Prefers metric units" in b_requests[0].messages[0].content[-1]["text"]
    assert manager.start_session("probe").system_prompt_block() == b_requests[0].messages[0].content[-1]["text"]

    # The write shows in the next turn's fence (the live delta), before the user's text.
    a3_user = human_messages(a_requests[3])[-1]
    assert a3_user.content.startswith(FENCE_OPEN)
    assert "Prefers metric units" in a3_user.content
    assert a3_user.content.endswith("\n\n" + A_TURNS[2])
    # The turn before the write had nothing to recall: sent as typed.
    assert human_messages(a_requests[1])[-1].content == A_TURNS[1]

    # Replay: each request extends the previous one within a thread (turn 3's fence re-sent in turn 4).
    assert_extends(a_requests)
    assert_extends(b_requests)
    assert human_messages(a_requests[4])[2].content == a3_user.content

    # Thread B's first turn recalls thread A's synced turn about the Alps, and session_search finds it.
    b1_user = human_messages(b_requests[0])[-1]
    assert b1_user.content.startswith(FENCE_OPEN) and "Alps" in b1_user.content
    search_result = [m for m in b_requests[1].messages if isinstance(m, ToolMessage)][-1]
    found = json.loads(search_result.content)
    assert "Alps" in json.dumps(found, ensure_ascii=False)

    # A tool call with bad arguments returns an error to the model and the loop goes on.
    bad = [m for m in b_requests[3].messages if isinstance(m, ToolMessage)][-1]
    error = json.loads(bad.content)
    assert error["success"] is False and "action must be one of" in error["error"]
    assert result["messages"][-1].content == "Sorry, saving failed."
    assert sorted(result) == ["messages"]  # ironmem's private state never shows in the agent's output

    # Every turn was synced, under the thread's session id.
    assert manager.builtin.index.turn_count("A") == len(A_TURNS)
    assert manager.builtin.index.turn_count("B") == len(B_TURNS)
    session = manager.start_session("search-probe")
    hits = json.loads(session.handle_tool_call("session_search", {"query": "metric units"}))
    assert "metric" in json.dumps(hits, ensure_ascii=False)

    # No fence anywhere in what the checkpointer stored, although the model was sent fences.
    assert any(FENCE_OPEN in r.text() for r in requests)
    for thread, turns in (("A", A_TURNS), ("B", B_TURNS)):
        state = agent.get_state(config(thread))
        humans = [m.content for m in state.values["messages"] if isinstance(m, HumanMessage)]
        assert humans == turns
        for snapshot in agent.get_state_history(config(thread)):
            assert FENCE_OPEN not in repr(snapshot.values)
    stored = b"".join(all_bytes([saver.storage, saver.writes, saver.blobs]))
    assert b"Persistent memory" in stored  # the frozen snapshot is checkpointed (private state) ...
    assert FENCE_BYTES not in stored and b"memory-context" not in stored  # ... the fence never is


def test_ephemeral_sends_only_the_current_turns_recall(manager: MemoryManager) -> None:
    model = ScriptedChatModel([
        tool_call("memory", {"action": "add", "target": "user", "content": "Allergic to peanuts"}),
        "Noted.",
        "No peanuts then.",
        "Bye.",
    ])
    agent = create_agent(model, middleware=[IronMemoryMiddleware(manager, recall_policy="ephemeral")],
                         checkpointer=InMemorySaver())
    run = make_runner(agent, "sync")
    for text in ("Remember my peanut allergy.", "Suggest a snack.", "Goodbye."):
        run("E", text)
    requests = model.requests
    snack = human_messages(requests[2])[-1]
    assert snack.content.startswith(FENCE_OPEN) and "Allergic to peanuts" in snack.content
    # Next turn: the earlier fence is gone from the request (the stored message never had it).
    later = human_messages(requests[3])
    assert later[1].content == "Suggest a snack."
    assert FENCE_OPEN not in requests[3].text()
    # Which is why ephemeral breaks the prefix: request 4 no longer extends request 3.
    prev = requests[2].serialized()
    assert requests[3].serialized()[: len(prev)] != prev
    # The system prompt still never changed.
    assert len({json.dumps(r.serialized()[0]) for r in requests}) == 1
    with pytest.raises(ValueError, match="recall_policy must be 'replay' or 'ephemeral'"):
        IronMemoryMiddleware(manager, recall_policy="sometimes")  # type: ignore[arg-type]


def test_recall_policy_has_one_name_in_both_adapters(manager: MemoryManager) -> None:
    """``recall_policy=`` in LangChain as in LlamaIndex; the old LangChain name still works, with a warning."""
    llama_index = pytest.importorskip("ironmem.adapters.llama_index")
    assert IronMemoryMiddleware(manager, recall_policy="ephemeral").recall_policy == "ephemeral"
    with pytest.warns(DeprecationWarning, match="recall_policy"):
        old = IronMemoryMiddleware(manager, recall="ephemeral")
    assert old.recall_policy == "ephemeral"
    memory = llama_index.IronMemory.from_defaults(manager=manager, recall_policy="ephemeral")
    assert memory.recall_policy == "ephemeral"
    memory.close()
    with pytest.warns(DeprecationWarning, match="recall_policy"):
        memory = llama_index.IronMemory.from_defaults(manager=manager, recall="ephemeral")
    assert memory.recall_policy == "ephemeral"
    memory.close()


def test_replay_does_not_send_a_recalled_turn_twice(manager: MemoryManager) -> None:
    """The first turn's fence, replayed in every later request, already shows the recalled past turn: the second
    turn's recall of the same turn adds no fence; under ephemeral (earlier fence dropped) it comes back."""
    manager.start_session("past").sync_turn("My cat Miso eats salmon kibble.", "Salmon kibble, noted.")
    questions = ("What does Miso eat?", "And what does Miso eat at night?")
    sent: dict[str, list[list[HumanMessage]]] = {}
    for policy in ("replay", "ephemeral"):
        model = ScriptedChatModel(["Salmon kibble.", "The same kibble."])
        agent = create_agent(model, middleware=[IronMemoryMiddleware(manager, recall_policy=policy)],
                             checkpointer=InMemorySaver())
        run = make_runner(agent, "sync")
        for text in questions:
            run(f"cat-{policy}", text)
        sent[policy] = [human_messages(r) for r in model.requests]
    first, second = sent["replay"]
    assert first[0].content.startswith(FENCE_OPEN) and "salmon kibble" in first[0].content
    assert second[0].content == first[0].content  # replayed byte for byte
    assert second[1].content == questions[1]  # nothing new to recall: no second fence
    assert sum(m.content.count("salmon kibble") for m in second) == 1  # the item is in the request once
    ephemeral_second = sent["ephemeral"][1]
    assert ephemeral_second[0].content == questions[0]
    assert ephemeral_second[1].content.startswith(FENCE_OPEN) and "salmon kibble" in ephemeral_second[1].content


def test_prefetch_runs_once_per_user_turn(manager: MemoryManager) -> None:
    manager.start_session("past").sync_turn("My cat is called Miso.", "Cute name!")
    model = ScriptedChatModel([
        tool_call("session_search", {"query": "cat"}),
        tool_call("session_search", {"query": "Miso"}),
        "Your cat is Miso.",
    ])
    middleware = IronMemoryMiddleware(manager)
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    agent.invoke({"messages": [("user", "What is my cat called?")]}, config("once"))
    session = middleware.sessions["once"]
    assert session.prefetch_count == 1  # three model calls, one recall
    fenced = [human_messages(r)[-1].content for r in model.requests]
    assert len(set(fenced)) == 1 and "Miso" in fenced[0]
    # Re-invoking the thread without a new user message does not prefetch again.
    model.reset(["Still Miso."])
    agent.invoke({"messages": []}, config("once"))
    assert session.prefetch_count == 1
    assert human_messages(model.requests[0])[-1].content == fenced[0]


def test_resume_with_new_manager_keeps_snapshot_bytes(home: Path) -> None:
    saver = InMemorySaver()
    first_manager = MemoryManager(home=home)
    first_manager.start_session("past").sync_turn("I build particle detectors for a living.", "Fascinating!")
    first_model = ScriptedChatModel(["They detect particles."])
    first_middleware = IronMemoryMiddleware(first_manager)
    first = create_agent(first_model, system_prompt=SYSTEM_PROMPT,
                         middleware=[first_middleware], checkpointer=saver)
    first.invoke({"messages": [("user", "Tell me about particle detectors.")]}, config("R"))
    first_snapshot_hash = first_middleware.sessions["R"].snapshot_hash
    sent_before = first_model.requests[-1]
    assert FENCE_OPEN in human_messages(sent_before)[-1].content  # turn 1 had a recall to replay
    # Meanwhile another conversation writes memory; a session started now would see it.
    first_manager.start_session("other").handle_tool_call(
        "memory", {"action": "add", "target": "user", "content": "Works at CERN"})
    first_manager.close()

    second_manager = MemoryManager(home=home)
    try:
        second_model = ScriptedChatModel(["Sure."])
        middleware = IronMemoryMiddleware(second_manager)
        second = create_agent(second_model, system_prompt=SYSTEM_PROMPT, middleware=[middleware],
                              checkpointer=saver)
        second.invoke({"messages": [("user", "Go on.")]}, config("R"))
        sent_after = second_model.requests[0]
        assert sent_after.serialized()[0] == sent_before.serialized()[0]
        assert "Works at CERN" not in sent_after.system_text
        # The new process resumed the thread's own snapshot, so the write made meanwhile is live delta.
        assert middleware.sessions["R"].snapshot_hash == first_snapshot_hash
        assert "Works at CERN" in human_messages(sent_after)[-1].content
        assert_extends([sent_before, sent_after])
    finally:
        second_manager.close()


SQLITE_RUN = textwrap.dedent(
    """
    import json, sys
    from langchain.agents import create_agent
    from langgraph.checkpoint.sqlite import SqliteSaver
    from ironmem import MemoryManager
    from ironmem.adapters.langchain import IronMemoryMiddleware
    from ironmem.testing.langchain import ScriptedChatModel

    home, db, out, text = sys.argv[1:]
    model = ScriptedChatModel(["ok: " + text])
    with MemoryManager(home=home) as manager, SqliteSaver.from_conn_string(db) as saver:
        middleware = IronMemoryMiddleware(manager)
        agent = create_agent(model, system_prompt="Be brief.", middleware=[middleware], checkpointer=saver)
        agent.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": "persisted"}})
        middleware.close()
    with open(out, "w") as f:
        json.dump([r.serialized() for r in model.requests], f)
    """
)


def test_resume_in_a_new_process_from_sqlite(tmp_path: Path, home: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    script = tmp_path / "run_turn.py"
    script.write_text(SQLITE_RUN)
    db = tmp_path / "checkpoints.sqlite"

    def turn(text: str, out: Path) -> list[list[dict[str, Any]]]:
        subprocess.run([sys.executable, str(script), str(home), str(db), str(out), text], check=True,
                       capture_output=True, timeout=120)
        return json.loads(out.read_text())

    with MemoryManager(home=home) as manager:
        manager.start_session("old").sync_turn("We talked about sourdough starters.", "Yes, feed it daily.")
    first = turn("How is my sourdough starter doing?", tmp_path / "one.json")
    with MemoryManager(home=home) as manager:  # a write between the two processes
        manager.start_session("other").handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "Bakes on Sundays"})
    second = turn("And what about rye?", tmp_path / "two.json")

    assert "sourdough" in json.dumps(first[0][1]) and FENCE_OPEN in json.dumps(first[0][1])
    assert second[0][0] == first[0][0]  # same system prompt bytes in a new process
    assert "Bakes on Sundays" not in json.dumps(second[0][0])
    assert second[0][: len(first[0])] == first[0]  # and the replayed history (with turn 1's fence) matches


def test_without_thread_id_one_fresh_session_per_middleware(manager: MemoryManager) -> None:
    model = ScriptedChatModel(["One.", "Two.", "Three."])
    middleware = IronMemoryMiddleware(manager, user_id="ada")
    agent = create_agent(model, middleware=[middleware])  # no checkpointer, no thread id
    out = agent.invoke({"messages": [("user", "Please remember: my name is Ada")]})
    out = agent.invoke({"messages": [*out["messages"], HumanMessage("What is my name?")]})
    assert list(middleware.sessions) == [middleware._registry.default_id]
    session = middleware.sessions[middleware._registry.default_id]
    assert session.user_id == "ada" and manager.builtin.index.turn_count(session.id) == 2
    assert_extends(model.requests)  # replay works without a checkpointer too
    other = IronMemoryMiddleware(manager)
    create_agent(model, middleware=[other]).invoke({"messages": [("user", "hi")]})
    assert list(other.sessions) != list(middleware.sessions)
    middleware.close()
    other.close()


def test_user_id_from_run_context(manager: MemoryManager) -> None:
    model = ScriptedChatModel(["Hi Bob."])
    middleware = IronMemoryMiddleware(manager, user_id="default-user")
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    agent.invoke({"messages": [("user", "hello")]}, config("U"), context={"user_id": "bob"})
    assert middleware.sessions["U"].user_id == "bob"


async def test_async_tool_call_routes_to_the_thread_session(manager: MemoryManager) -> None:
    model = ScriptedChatModel([
        tool_call("memory", {"action": "add", "target": "memory", "content": "Deploys happen on Fridays"}),
        "Noted.",
    ])
    middleware = IronMemoryMiddleware(manager)
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    await agent.ainvoke({"messages": [("user", "We deploy on Fridays.")]}, config("async-thread"))
    assert list(middleware.sessions) == ["async-thread"]
    assert "Deploys happen on Fridays" in manager.builtin.state("memory").entries
    assert manager.builtin.index.turn_count("async-thread") == 1


def test_block_contents_and_no_system_prompt(manager: MemoryManager) -> None:
    from langchain_core.messages import SystemMessage

    manager.start_session("past").sync_turn("Our release train leaves every second Tuesday.", "Got it.")
    system = SystemMessage(content=[{"type": "text", "text": "Rule one."}, "Rule two."])
    user_blocks = [{"type": "text", "text": "When does the release train leave?"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    model = ScriptedChatModel(["Every second Tuesday.", "Hi."])
    middleware = IronMemoryMiddleware(manager)
    agent = create_agent(model, system_prompt=system, middleware=[middleware], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage(content=user_blocks)]}, config("blocks"))
    sent = model.requests[0]
    snapshot = middleware.sessions["blocks"].system_prompt_block()
    assert sent.messages[0].content == [{"type": "text", "text": "Rule one."}, {"type": "text", "text": "Rule two."},
                                        {"type": "text", "text": snapshot}]
    user = sent.messages[1].content
    assert user[0]["type"] == "text" and user[0]["text"].startswith(FENCE_OPEN) and "release train" in user[0]["text"]
    assert user[1:] == user_blocks  # the user's own blocks follow, untouched
    stored = agent.get_state(config("blocks")).values["messages"][0].content
    assert stored == user_blocks

    bare = ScriptedChatModel(["Hi."])
    create_agent(bare, middleware=[IronMemoryMiddleware(manager)]).invoke({"messages": [("user", "hi")]})
    assert bare.requests[0].messages[0].content == [
        {"type": "text", "text": bare.requests[0].messages[0].content[0]["text"]}]
    assert bare.requests[0].system_text.startswith("Persistent memory")
