"""IronMemory as ``memory=`` of LlamaIndex chat engines: SimpleChatEngine and CondensePlusContextChatEngine.

Two sessions, several turns, a memory write in the middle; the checks run on what the scripted model received.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.chat_engine import CondensePlusContextChatEngine, SimpleChatEngine
from llama_index.core.embeddings import MockEmbedding

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.llama_index import IronMemory
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM, ScriptedRequest

PREFERENCE = "Prefers window seats"


def assert_clean(memory: IronMemory, turns: int) -> None:
    stored = memory.get_all()
    assert len(stored) == 2 * turns
    assert all(FENCE_OPEN not in (m.content or "") and m.role.value != "system" for m in stored)
    assert (memory.session.prefetch_count, memory.session.turns_synced) == (turns, turns)


def synced_turns(memory: IronMemory, query: str) -> list[str]:
    result = json.loads(memory.session.handle_tool_call("session_search", {"query": query, "limit": 20}))
    return [hit["text"] for hit in result["results"] if hit["kind"] == "turn"]


def assert_same_snapshot(requests: list[ScriptedRequest], snapshot: str) -> None:
    for request in requests:
        assert snapshot in request.system_texts


async def test_simple_chat_engine_sync_async_and_streaming(manager: MemoryManager) -> None:
    one = IronMemory.from_defaults(manager=manager, session_id="chat-1")
    llm = ScriptedFunctionCallingLLM(["Hello!", "Noted.", "An aisle or a window?", "A window seat, then."])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=one, system_prompt="Be brief.")

    assert str(engine.chat("Hi, I'm booking a flight")) == "Hello!"
    one.session.handle_tool_call("memory", {"action": "add", "target": "user", "content": PREFERENCE})
    assert str(await engine.achat("Remember my seat preference")) == "Noted."
    streamed = engine.stream_chat("Which seat should I pick?")
    assert "".join(streamed.response_gen) == "An aisle or a window?"  # stored from the engine's thread
    astreamed = await engine.astream_chat("Decide for me")
    assert "".join([token async for token in astreamed.async_response_gen()]) == "A window seat, then."
    if astreamed.awrite_response_to_history_task is not None:
        await astreamed.awrite_response_to_history_task

    requests = llm.requests
    assert [r.kind for r in requests] == ["chat", "chat", "stream_chat", "stream_chat"]
    for request in requests:
        assert request.system_texts == ["Be brief.", one.snapshot]
    assert PREFERENCE not in one.snapshot
    fenced = requests[1].messages[-1].content
    assert fenced.startswith(FENCE_OPEN) and f"[user profile] {PREFERENCE}" in fenced
    assert fenced.endswith("Remember my seat preference")
    # replay: turn 2's fence is sent again, byte for byte, in every later request
    for later in requests[2:]:
        assert later.messages[4].content == fenced
    assert_clean(one, 4)
    assert "User: Which seat should I pick?\nAssistant: An aisle or a window?" in synced_turns(one, "seat")

    two = IronMemory.from_defaults(manager=manager, session_id="chat-2")
    llm2 = ScriptedFunctionCallingLLM(["Window, as usual.", "Bye!"])
    engine2 = SimpleChatEngine.from_defaults(llm=llm2, memory=two)
    engine2.chat("Book me a seat on the flight")
    engine2.chat("Thanks")
    assert PREFERENCE in two.snapshot
    for request in llm2.requests:
        assert request.system_texts == [two.snapshot]
    assert "Hi, I'm booking a flight" in llm2.requests[0].messages[-1].content  # recalled from session 1
    assert_clean(two, 2)
    await one.aclose()
    await two.aclose()


def test_condense_plus_context_chat_engine(manager: MemoryManager) -> None:
    index = VectorStoreIndex.from_documents(
        [Document(text="Flights to Lisbon leave daily at 9:00.")],
        embed_model=MockEmbedding(embed_dim=8),
    )
    one = IronMemory.from_defaults(manager=manager, session_id="rag-1")
    # the engine condenses the question (a completion) whenever the memory returns history, then answers
    llm = ScriptedFunctionCallingLLM(
        [
            "When do flights to Lisbon leave?",
            "Daily at 9:00.",
            "What is my seat preference?",
            "I will remember that.",
            "Which seat for the Lisbon flight?",
            "A window seat.",
        ]
    )
    engine = CondensePlusContextChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=1), llm=llm, memory=one
    )
    assert str(engine.chat("When do flights leave?")) == "Daily at 9:00."
    one.session.handle_tool_call("memory", {"action": "add", "target": "user", "content": PREFERENCE})
    assert str(engine.chat("I always like a window seat")) == "I will remember that."
    assert str(engine.chat("Which seat should I book?")) == "A window seat."

    answers = [r for r in llm.requests if r.kind == "chat"]
    assert len(answers) == 3 and len(llm.requests) == 6
    assert_same_snapshot(llm.requests[1::2], one.snapshot)
    for condense in llm.requests[0::2]:  # the condense prompt quotes the history, snapshot included
        assert one.snapshot in condense.text()
    # the engine asks for memory before it stores the user message: the fence comes right before the query
    second = answers[1].messages
    assert second[-2].role.value == "user" and second[-2].content.startswith(FENCE_OPEN)
    assert PREFERENCE in second[-2].content and second[-1].content == "I always like a window seat"
    assert "Flights to Lisbon leave daily" in answers[1].system_texts[0]  # retrieved context
    assert_clean(one, 3)

    two = IronMemory.from_defaults(manager=manager, session_id="rag-2")
    llm2 = ScriptedFunctionCallingLLM(["Seat for Lisbon?", "Window, as you prefer."])
    engine2 = CondensePlusContextChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=1), llm=llm2, memory=two
    )
    engine2.chat("Book my usual seat to Lisbon")
    assert PREFERENCE in two.snapshot and two.snapshot in llm2.requests[1].system_texts
    assert_clean(two, 1)
    one.close()
    two.close()
