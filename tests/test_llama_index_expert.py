"""What a LlamaIndex expert expects of IronMemory (issue 35, items 3 and 11): the token limit covers what is sent,
one system message over a Memory with blocks, Anthropic cache breakpoints that fit, a restart that keeps the
snapshot and the fences (two real processes), and a session id that another user cannot take over."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import CachePoint, ChatMessage, TextBlock
from llama_index.core.memory import ChatMemoryBuffer, Memory, StaticMemoryBlock

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.llama_index import IronMemory
from ironmem.core.errors import SessionOwnerError
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def fill_memory(manager: MemoryManager) -> None:
    """A snapshot of a few hundred tokens: notes and a profile written before the conversation starts."""
    session = manager.start_session("setup")
    for n in range(8):
        session.handle_tool_call("memory", {
            "action": "add", "target": "memory",
            "content": f"Project note {n}: the staging cluster {n} deploys from the release branch every evening."})
    for fact in ("Works as an airline pilot", "Flies the A320 out of Lyon", "Prefers metric units"):
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": fact})


# -- token limit ---------------------------------------------------------------------------------------------
def test_token_limit_covers_snapshot_fences_and_history(manager: MemoryManager) -> None:
    fill_memory(manager)
    manager.start_session("past").sync_turn("The staging cluster 3 failed last week.", "It was the disk.")
    memory = IronMemory.from_defaults(manager=manager, session_id="long", token_limit=600)
    assert memory.token_limit == 600  # the setting lives on IronMemory itself
    assert isinstance(memory.history, Memory) and memory.history.token_limit == 600
    tokenizer = memory.history.tokenizer_fn
    snapshot_tokens = len(tokenizer(memory.snapshot))
    assert 200 < snapshot_tokens < 500  # the snapshot alone takes a large share of the limit
    for n in range(14):
        memory.put(user(f"Turn {n}: what about staging cluster {n % 8}? Tell me everything you know about it."))
        sent = memory.get()
        total = sum(len(tokenizer(m.content or "")) for m in sent)
        assert total <= 600, f"turn {n}: {total} tokens sent over a 600-token limit"
        assert sent[0].content == memory.snapshot  # never cut
        assert sent[-1].content.endswith(f"Turn {n}: what about staging cluster {n % 8}? "
                                         "Tell me everything you know about it.")  # the current turn stays
        memory.put(assistant(f"Cluster {n % 8} deploys every evening from the release branch, as usual."))
    assert any(FENCE_OPEN in (m.content or "") for m in sent)  # fences are inside the limit, not dropped
    memory.close()


def test_token_limit_is_checked_and_serialized(manager: MemoryManager) -> None:
    with pytest.raises(ValueError, match="token_limit must be a positive number"):
        IronMemory.from_defaults(manager=manager, token_limit=0)
    memory = IronMemory.from_defaults(manager=manager, session_id="tl", token_limit=900)
    assert IronMemory.from_dict(memory.to_dict()).token_limit == 900
    memory.close()


# -- one system message ------------------------------------------------------------------------------------
async def test_one_system_message_over_a_memory_with_blocks(manager: MemoryManager) -> None:
    history = Memory.from_defaults(
        session_id="blocks", token_limit=4000,
        memory_blocks=[StaticMemoryBlock(name="core_info", static_content="The user flies gliders on weekends.")],
    )
    memory = IronMemory.from_defaults(manager=manager, session_id="blocks", history=history)
    llm = ScriptedFunctionCallingLLM(["Sure.", "Again."])
    agent = FunctionAgent(llm=llm, tools=memory.tools())  # no system_prompt: every system message is memory's
    await agent.run(user_msg="Hello there", memory=memory)
    await agent.run(user_msg="And again", memory=memory)
    for request in llm.requests:
        assert len(request.system_texts) == 1, request.system_texts
        system = request.system_texts[0]
        assert system.startswith(memory.snapshot)  # the stable part first
        assert "The user flies gliders on weekends." in system
    assert llm.requests[1].system_texts == llm.requests[0].system_texts
    assert all(m.role.value != "system" for m in memory.get_all())  # nothing of it stored
    await memory.aclose()


# -- Anthropic cache breakpoints ----------------------------------------------------------------------------
def test_cache_points_mark_the_snapshot_and_the_newest_message(manager: MemoryManager) -> None:
    """llama-index-llms-anthropic turns a ``CachePoint`` block into ``cache_control`` on the block before it;
    its ``cache_idx=-1`` marks every block of every message instead, more than Anthropic's limit of 4."""
    manager.start_session("past").sync_turn("My glider is an ASK 21.", "A fine two-seater.")
    memory = IronMemory.from_defaults(manager=manager, session_id="cache", cache_points=True)
    memory.put(user("Which glider do I fly?"))
    memory.put(assistant("An ASK 21."))
    memory.put(user("And what is its glide ratio?"))
    sent = memory.get()
    points = [(i, j) for i, m in enumerate(sent) for j, b in enumerate(m.blocks) if isinstance(b, CachePoint)]
    assert points == [(0, 1), (len(sent) - 1, len(sent[-1].blocks) - 1)]  # 2 of Anthropic's 4 breakpoints
    assert isinstance(sent[0].blocks[0], TextBlock) and sent[0].blocks[0].text == memory.snapshot
    assert sent[-1].blocks[0].text.endswith("And what is its glide ratio?")
    again = memory.get()
    assert [m.model_dump() for m in again] == [m.model_dump() for m in sent]  # stable bytes, stable marks
    # The cache points are never stored, even when an engine stores what memory returned.
    memory.set(sent)
    assert not any(isinstance(b, CachePoint) for m in memory.get_all() for b in m.blocks)
    assert [m.content for m in memory.get_all()] == ["Which glider do I fly?", "An ASK 21.",
                                                     "And what is its glide ratio?"]
    plain = IronMemory.from_defaults(manager=manager, session_id="plain")
    plain.put(user("hi"))
    assert not any(isinstance(b, CachePoint) for m in plain.get() for b in m.blocks)  # opt-in only
    memory.close()
    plain.close()


# -- resume in a new process (item 11) ------------------------------------------------------------------------
RESUME_TURN = textwrap.dedent(
    """
    import json, sys
    from llama_index.core.llms import ChatMessage
    from ironmem import MemoryManager
    from ironmem.adapters.llama_index import IronMemory

    home, db, out, text, answer, write = sys.argv[1:]
    with MemoryManager(home=home) as manager:
        memory = IronMemory.from_defaults(manager, session_id="trip", user_id="ada", history_path=db)
        memory.put(ChatMessage(role="user", content=text))
        sent = memory.get()
        if write:
            memory.session.handle_tool_call("memory", {"action": "add", "target": "user", "content": write})
        memory.put(ChatMessage(role="assistant", content=answer))
        memory.close()
    with open(out, "w") as f:
        json.dump([[m.role.value, m.content] for m in sent], f)
    """
)


def test_resumed_session_keeps_its_snapshot_and_fences_across_processes(tmp_path: Path, home: Path) -> None:
    script = tmp_path / "turn.py"
    script.write_text(RESUME_TURN)
    db = tmp_path / "chat.db"

    def turn(n: int, text: str, answer: str, write: str = "") -> list[list[str]]:
        out = tmp_path / f"turn{n}.json"
        done = subprocess.run([sys.executable, str(script), str(home), str(db), str(out), text, answer, write],
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        assert "NEW snapshot" not in done.stderr
        return json.loads(out.read_text())

    with MemoryManager(home=home) as manager:
        manager.start_session("old", user_id="ada").sync_turn("We flew to Porto in March.", "Lovely city.")
        manager.start_session("setup", user_id="ada").handle_tool_call(
            "memory", {"action": "add", "target": "user", "content": "Prefers aisle seats"})
    first = turn(1, "Plan a trip like the Porto one.", "How about Lisbon?", write="Travels with a cello")
    with MemoryManager(home=home) as manager:  # a write by another session between the two processes
        manager.start_session("elsewhere", user_id="ada").handle_tool_call(
            "memory", {"action": "add", "target": "user", "content": "Has a Schengen visa"})
    second = turn(2, "Book it.", "Booked.")

    assert first[1][1].startswith(FENCE_OPEN) and "Porto" in first[1][1]  # turn 1 had a fence
    assert second[0] == first[0]  # the same snapshot bytes in a new process
    assert "Travels with a cello" not in second[0][1] and "Has a Schengen visa" not in second[0][1]
    assert second[: len(first)] == first  # the whole earlier request, turn 1's fence included: cache hit
    assert "Travels with a cello" in second[-1][1] and "Has a Schengen visa" in second[-1][1]  # live delta


def test_a_history_without_saved_state_says_it_starts_a_new_snapshot(manager: MemoryManager) -> None:
    old = ChatMemoryBuffer.from_defaults(chat_history=[user("hi"), assistant("hello")])
    with pytest.warns(RuntimeWarning, match="NEW snapshot"):
        memory = IronMemory.from_defaults(manager=manager, session_id="buffer", history=old)
    memory.close()


# -- one user per session (item 1) ---------------------------------------------------------------------------
def test_a_session_id_is_refused_to_a_second_user(manager: MemoryManager, tmp_path: Path) -> None:
    ada = IronMemory.from_defaults(manager=manager, session_id="shared-id", user_id="ada")
    with pytest.raises(SessionOwnerError, match="'ada'.*refusing.*'bob'"):
        IronMemory.from_defaults(manager=manager, session_id="shared-id", user_id="bob")
    same = IronMemory.from_defaults(manager=manager, session_id="shared-id")  # no user named: still Ada's
    assert same.session.user_id == "ada"
    same.close()
    ada.close()

    db = tmp_path / "chat.db"
    first = IronMemory.from_defaults(manager=manager, session_id="kept", user_id="ada", history_path=db)
    first.put(user("My seat is 12C"))
    first.close()
    code = textwrap.dedent(
        f"""
        from ironmem import MemoryManager
        from ironmem.adapters.llama_index import IronMemory
        from ironmem.core.errors import SessionOwnerError
        with MemoryManager(home={str(manager.home)!r}) as manager:
            try:
                IronMemory.from_defaults(manager, session_id="kept", user_id="bob", history_path={str(db)!r})
            except SessionOwnerError as exc:
                print("refused:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: session 'kept' was started by user 'ada'")
    assert "bob" not in {p.name for p in (Path(manager.home) / "users").iterdir()} if (
        Path(manager.home) / "users").exists() else True


def test_system_message_text_blocks_stay_blocks(manager: MemoryManager) -> None:
    history = Memory.from_defaults(
        session_id="tb", token_limit=4000,
        memory_blocks=[StaticMemoryBlock(name="core", static_content="Static block text.")],
    )
    memory = IronMemory.from_defaults(manager=manager, session_id="tb", history=history)
    memory.put(user("hi"))
    system = memory.get()[0]
    assert isinstance(system.blocks[0], TextBlock) and system.blocks[0].text == memory.snapshot
    assert "Static block text." in (system.content or "")
    memory.close()


def test_a_fact_removed_while_the_session_was_closed_is_superseded(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with MemoryManager(home) as manager:
        memory = IronMemory.from_defaults(manager, session_id="away", history_path=db)
        memory.put(user("I live in Lyon."))
        memory.get()
        memory.session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Lives in Lyon"})
        memory.put(assistant("Noted."))
        memory.put(user("Plan my weekend."))
        assert "[user profile] Lives in Lyon" in (memory.get()[-1].content or "")
        memory.put(assistant("A walk by the Saone?"))
        memory.close()
    with MemoryManager(home) as manager:  # a new manager and session, as in a new process
        manager.start_session("cleanup").handle_tool_call(
            "memory", {"action": "remove", "target": "user", "old_text": "Lyon"})
        memory = IronMemory.from_defaults(manager, session_id="away", history_path=db)
        memory.put(user("Where do I live?"))
        users = [m.content or "" for m in memory.get() if m.role.value == "user"]
        assert "[user profile] Lives in Lyon" in users[1]  # turn 2's fence, replayed as it was
        assert "[user profile, removed - no longer true] Lives in Lyon" in users[-1]
        memory.close()


def test_tools_are_typed_precisely(manager: MemoryManager) -> None:
    import typing

    from llama_index.core.tools import FunctionTool

    from ironmem.adapters.llama_index import memory as memory_module

    hints = typing.get_type_hints(IronMemory.tools, vars(memory_module))
    assert hints["return"] == list[FunctionTool]
    memory = IronMemory.from_defaults(manager=manager)
    assert all(isinstance(tool, FunctionTool) for tool in memory.tools())
    memory.close()
