"""IronMemory on its own: what get() returns, recall once per user message, syncing, copies, serialization."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage, TextBlock
from llama_index.core.memory import BaseMemoryBlock, Memory

from ironmem import FENCE_OPEN, SYSTEM_NOTE, MemoryManager
from ironmem.adapters.llama_index import (
    IronMemory,
    SnapshotMemoryBlock,
    _registry,
)
from ironmem.testing.faulty import SlowSyncProvider


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str, tool_calls: list[dict[str, Any]] | None = None) -> ChatMessage:
    kwargs = {"tool_calls": tool_calls} if tool_calls else {}
    return ChatMessage(role="assistant", content=text, additional_kwargs=kwargs)


def memory_call(content: str) -> list[dict[str, Any]]:
    arguments = json.dumps({"action": "add", "target": "memory", "content": content})
    return [{"id": "call_1", "type": "function", "function": {"name": "memory", "arguments": arguments}}]


def search(memory: IronMemory, query: str) -> list[dict[str, Any]]:
    return json.loads(memory.session.handle_tool_call("session_search", {"query": query}))["results"]


@pytest.fixture
def memory(manager: MemoryManager) -> IronMemory:
    manager.start_session("earlier").sync_turn("I adopted a cat named Miso", "Lovely name!")
    mem = IronMemory.from_defaults(manager=manager, session_id="s1")
    yield mem
    mem.close()


def test_get_returns_snapshot_then_history_with_fenced_copy(memory: IronMemory) -> None:
    memory.put(user("Tell me about my cat Miso"))
    out = memory.get()
    assert [m.role.value for m in out] == ["system", "user"]
    assert out[0].content == memory.session.system_prompt_block() == memory.snapshot
    fenced = out[1].content
    assert fenced.startswith(FENCE_OPEN) and SYSTEM_NOTE in fenced
    assert "I adopted a cat named Miso" in fenced  # recalled from the earlier session
    assert fenced.endswith("</memory-context>\n\nTell me about my cat Miso")
    # the copy is never stored
    assert [m.content for m in memory.get_all()] == ["Tell me about my cat Miso"]


def test_recall_is_computed_once_per_user_message(memory: IronMemory) -> None:
    memory.put(user("Tell me about Miso"))
    first = memory.get()
    for _ in range(4):  # FunctionAgent calls get after every tool round
        assert [m.content for m in memory.get(input="Tell me about Miso")] == [m.content for m in first]
    assert memory.session.prefetch_count == 1
    memory.put(assistant("Miso is your cat."))
    memory.get()
    assert memory.session.prefetch_count == 1  # the turn is over, nothing new to recall
    memory.put(user("And what else?"))
    memory.get()
    memory.get()
    assert memory.session.prefetch_count == 2


async def test_async_get_shares_the_same_recall(memory: IronMemory) -> None:
    await memory.aput(user("Tell me about Miso"))
    a = await memory.aget()
    b = await memory.aget(input="Tell me about Miso")
    assert a[1].content.startswith(FENCE_OPEN)
    assert [m.content for m in a] == [m.content for m in b]
    assert memory.session.prefetch_count == 1


def test_replay_keeps_every_request_an_extension_of_the_previous_one(memory: IronMemory) -> None:
    requests = []
    memory.put(user("Tell me about Miso"))
    requests.append([m.content for m in memory.get()])
    memory.session.handle_tool_call(
        "memory", {"action": "add", "target": "user", "content": "Vet is Dr. Ruiz"}
    )
    memory.put(assistant("Miso is your cat."))
    memory.put(user("Who is Miso's vet?"))
    requests.append([m.content for m in memory.get()])
    memory.put(assistant("Dr. Ruiz."))
    memory.put(user("Thanks"))
    requests.append([m.content for m in memory.get()])
    for earlier, later in zip(requests, requests[1:], strict=False):
        assert later[: len(earlier)] == earlier  # prefix: the provider's cache keeps hitting
    assert "Vet is Dr. Ruiz" in requests[1][-1]  # the live delta, in the next turn's fence
    assert "Vet is Dr. Ruiz" not in requests[1][0]  # ... never in the frozen snapshot


def test_ephemeral_policy_shows_only_the_current_fence(manager: MemoryManager) -> None:
    manager.start_session("earlier").sync_turn("I adopted a cat named Miso", "Lovely")
    mem = IronMemory.from_defaults(manager=manager, session_id="s1", recall_policy="ephemeral")
    mem.put(user("Tell me about Miso"))
    assert mem.get()[1].content.startswith(FENCE_OPEN)
    mem.put(assistant("A cat."))
    mem.put(user("Is Miso a cat?"))
    out = mem.get()
    assert out[1].content == "Tell me about Miso"
    assert out[3].content.startswith(FENCE_OPEN)
    with pytest.raises(ValueError, match="recall_policy"):
        IronMemory.from_defaults(manager=manager, recall_policy="sometimes")  # type: ignore[arg-type]


def test_a_turn_is_synced_once_when_a_final_answer_arrives(memory: IronMemory) -> None:
    memory.put(user("Remember that I like green tea"))
    memory.put(assistant("", tool_calls=memory_call("User likes green tea")))
    memory.put(
        ChatMessage(role="tool", content='{"success": true}', additional_kwargs={"tool_call_id": "call_1"})
    )
    assert memory.session.turns_synced == 0  # a tool-calling message does not end the turn
    memory.put(assistant("Noted: green tea."))
    assert memory.session.turns_synced == 1
    memory.put(assistant("(a second final message for the same question)"))
    assert memory.session.turns_synced == 1
    hits = search(memory, "green tea")
    assert [h["text"] for h in hits if h["kind"] == "turn"] == [
        "User: Remember that I like green tea\nAssistant: Noted: green tea."
    ]


async def test_aput_messages_syncs_the_final_answer_of_a_scratchpad(memory: IronMemory) -> None:
    await memory.aput(user("Save my tea preference"))
    await memory.aput_messages(
        [
            assistant("", tool_calls=memory_call("Likes tea")),
            ChatMessage(role="tool", content="{}", additional_kwargs={"tool_call_id": "call_1"}),
            assistant("Saved."),
        ]
    )
    assert memory.session.turns_synced == 1
    assert search(memory, "Save my tea preference")[0]["text"].endswith("Assistant: Saved.")


def test_set_syncs_each_finished_turn_once(memory: IronMemory) -> None:
    history = [
        user("first question"),
        assistant("first answer"),
        user("second question"),
        assistant("second answer"),
        user("pending question"),
    ]
    memory.set(history)
    assert memory.session.turns_synced == 2
    memory.set(history)  # the same history again: nothing new
    assert memory.session.turns_synced == 2
    assert [m.content for m in memory.get_all()] == [m.content for m in history]


async def test_aset_and_areset(memory: IronMemory) -> None:
    await memory.aset([user("q"), assistant("a")])
    assert memory.session.turns_synced == 1
    assert len(await memory.aget_all()) == 2
    await memory.areset()
    assert await memory.aget_all() == []
    assert [m.role.value for m in await memory.aget()] == ["system"]


def test_fence_and_snapshot_never_reach_the_stored_history(memory: IronMemory) -> None:
    memory.put(user("Tell me about Miso"))
    shown = memory.get()
    assert shown[1].content.startswith(FENCE_OPEN)
    memory.set(shown + [assistant("Miso is a cat.")])  # naive code that writes back what it was shown
    stored = memory.get_all()
    assert [(m.role.value, m.content) for m in stored] == [
        ("user", "Tell me about Miso"),
        ("assistant", "Miso is a cat."),
    ]
    assert all(FENCE_OPEN not in (m.content or "") for m in stored)


def test_reset_clears_history_and_recall_but_not_memory_files(memory: IronMemory) -> None:
    memory.session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Keep this"})
    memory.put(user("Tell me about Miso"))
    memory.get()
    assert memory.session.prefetch_count == 1
    memory.reset()
    assert memory.get_all() == []
    assert list(memory.manager.builtin.state("memory").entries) == ["Keep this"]
    memory.put(user("Tell me about Miso"))  # same text at the same position: a new message after a reset
    memory.get()
    assert memory.session.prefetch_count == 2


def test_kwargs_reach_the_history_memory(manager: MemoryManager) -> None:
    seen: list[dict[str, Any]] = []

    class Recorder(BaseMemoryBlock[str]):
        async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
            seen.append(dict(block_kwargs))
            return ""

        async def _aput(self, messages: list[ChatMessage]) -> None:
            return None

    history = Memory.from_defaults(session_id="kw", memory_blocks=[Recorder(name="recorder")])
    mem = IronMemory.from_defaults(manager=manager, history=history)
    mem.put(user("hello"))
    mem.get(initial_token_count=42)
    assert seen[-1]["initial_token_count"] == 42


def test_deep_copies_share_one_memory(memory: IronMemory) -> None:
    clone = copy.deepcopy(memory)
    assert clone.session is memory.session
    clone.put(user("written through the copy"))
    assert [m.content for m in memory.get_all()] == ["written through the copy"]
    shallow = memory.model_copy()
    assert shallow.history is memory.history


def test_to_dict_round_trip_reattaches_in_this_process(memory: IronMemory) -> None:
    memory.put(user("Tell me about Miso"))
    memory.get()
    data = json.loads(json.dumps(memory.to_dict()))  # JSON-clean
    assert data["class_name"] == "IronMemory"
    again = IronMemory.from_dict(data)
    assert again.session is memory.session and again.history is memory.history
    again.get()
    assert memory.session.prefetch_count == 1  # the rebuilt object shares the recall cache
    again.put(assistant("A cat."))
    assert memory.session.turns_synced == 1
    restored = pickle.loads(pickle.dumps(memory))
    assert restored.session is memory.session


def test_rebuilt_in_a_new_process_from_its_serialized_form(manager: MemoryManager, tmp_path: Path) -> None:
    mem = IronMemory.from_defaults(manager=manager, session_id="s1", history_path=tmp_path / "history.db")
    mem.put(user("My cat is Miso"))
    mem.get()
    mem.session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Has a cat, Miso"})
    mem.put(assistant("Noted."))
    in_memory = IronMemory.from_defaults(manager=manager, session_id="s2")
    in_memory.put(user("kept in RAM"))
    payload = tmp_path / "memories.json"
    payload.write_text(json.dumps([mem.to_dict(), in_memory.to_dict()]))
    script = textwrap.dedent(
        f"""
        import json
        from llama_index.core.llms import ChatMessage
        from ironmem.adapters.llama_index import IronMemory
        a, b = (IronMemory.from_dict(d) for d in json.loads(open({str(payload)!r}).read()))
        before = {{
            "a_history": [m.content for m in a.get_all()],
            "a_snapshot": a.snapshot,
            "a_fences": len(a.recall_log),
            "b_history": [m.content for m in b.get_all()],
        }}
        a.put(ChatMessage(role="user", content="Anything about my cat?"))
        before["a_next_turn"] = a.get()[-1].content
        print(json.dumps(before))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["a_history"] == ["My cat is Miso", "Noted."]
    assert result["a_snapshot"] == mem.snapshot  # the resumed session keeps its frozen bytes
    assert "Has a cat, Miso" not in result["a_snapshot"]
    assert result["a_fences"] == 1
    assert result["b_history"] == ["kept in RAM"]  # carried inside the serialized form
    # the write made before the move still reaches the model, as the live delta of the next turn
    assert result["a_next_turn"].startswith(FENCE_OPEN) and "Has a cat, Miso" in result["a_next_turn"]
    # the other process appended to the same history file
    assert [m.content for m in mem.get_all()] == ["My cat is Miso", "Noted.", "Anything about my cat?"]


def test_history_path_keeps_the_conversation_across_managers(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    with MemoryManager(home=home) as first:
        mem = IronMemory.from_defaults(manager=first, session_id="chat-1", history_path=db)
        mem.put(user("hello"))
        mem.put(assistant("hi"))
        mem.close()
    with MemoryManager(home=home) as second:
        mem = IronMemory.from_defaults(manager=second, session_id="chat-1", history_path=db)
        assert [m.content for m in mem.get_all()] == ["hello", "hi"]
        mem.close()


def test_two_sessions_frozen_snapshot_and_next_session(manager: MemoryManager) -> None:
    one = IronMemory.from_defaults(manager=manager, session_id="one")
    before = one.snapshot
    one.session.handle_tool_call(
        "memory", {"action": "add", "target": "user", "content": "Prefers metric units"}
    )
    one.put(user("hi"))
    assert one.get()[0].content == before  # frozen
    two = IronMemory.from_defaults(manager=manager, session_id="two")
    assert "Prefers metric units" in two.snapshot and "Prefers metric units" not in before


def test_external_provider_receives_synced_turns(home: Path) -> None:
    provider = SlowSyncProvider(delay=0.0)
    with MemoryManager(home=home, external=provider) as manager:
        mem = IronMemory.from_defaults(manager=manager, session_id="s1")
        mem.put(user("Remember the launch is Friday"))
        mem.put(assistant("Noted."))
        mem.close()  # drains the background sync
        assert provider.synced == [("s1", "Remember the launch is Friday", "Noted.")]


def test_close_releases_the_handle_and_an_owned_manager(home: Path) -> None:
    before = _registry.count()
    mem = IronMemory.from_defaults(home=home, session_id="s1")
    assert _registry.count() == before + 1
    manager = mem.manager
    mem.close()
    assert _registry.count() == before
    with pytest.raises(RuntimeError, match="closed"):
        manager.start_session("x")
    with pytest.raises(RuntimeError, match="IronMemory is closed"):
        mem.get()


def test_bad_arguments_say_what_to_do(manager: MemoryManager) -> None:
    with pytest.raises(TypeError, match="MemoryManager"):
        IronMemory.from_defaults(manager="~/.ironmem")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="history must be"):
        IronMemory.from_defaults(manager=manager, history=["not", "a", "memory"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="history_path or async_database_uri"):
        IronMemory.from_defaults(
            manager=manager, history_path="a.db", async_database_uri="sqlite+aiosqlite:///b.db"
        )
    mem = IronMemory.from_defaults(manager=manager)
    with pytest.raises(TypeError, match="ChatMessage"):
        mem.put("plain text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="home"):
        IronMemory(session_id="x")


def test_multimodal_user_message_keeps_its_blocks(memory: IronMemory) -> None:
    from llama_index.core.base.llms.types import ImageBlock

    image = ImageBlock(url="https://example.com/miso.png")
    memory.put(ChatMessage(role="user", blocks=[image, TextBlock(text="Is this my cat Miso?")]))
    shown = memory.get()[1]
    assert isinstance(shown.blocks[0], TextBlock) and shown.blocks[0].text.startswith(FENCE_OPEN)
    assert shown.blocks[1:] == memory.get_all()[0].blocks


def test_snapshot_block_in_a_stock_memory(manager: MemoryManager) -> None:
    session = manager.start_session("s1")
    block = SnapshotMemoryBlock(session=session)
    own = Memory.from_defaults(session_id="own", memory_blocks=[block])
    own.put(user("hello"))
    first = own.get()[0].content
    assert session.system_prompt_block() in first
    session.handle_tool_call(
        "memory", {"action": "add", "target": "memory", "content": "Written mid-session"}
    )
    assert own.get()[0].content == first  # frozen
    assert copy.deepcopy(block).session is session
    assert SnapshotMemoryBlock.model_validate(block.model_dump()).session is session
    elsewhere = block.model_dump()
    elsewhere["session_handle"] = "unknown-in-this-process"  # as in another process: rebuilt from the fields
    rebuilt = SnapshotMemoryBlock.model_validate(elsewhere)
    assert (
        rebuilt.session is not session
        and rebuilt.session.system_prompt_block() == session.system_prompt_block()
    )
    with pytest.raises(TypeError, match="SnapshotMemoryBlock takes"):
        SnapshotMemoryBlock(session="s1")
