"""Hermes's optional provider hooks, called by the Session and by the adapters when history is compacted."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from ironmem import MemoryManager, MemoryProvider
from ironmem.core.provider import ToolSchema


class RecordingProvider(MemoryProvider):
    """An external provider that records every hook call (a real provider, not a mock of ironmem)."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def _note(self, hook: str, value: Any) -> None:
        with self.lock:
            self.calls.append((hook, value))

    def hook(self, name: str) -> list[Any]:
        with self.lock:
            return [v for h, v in self.calls if h == name]

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        self._note("initialize", session_id)

    def tool_schemas(self) -> list[ToolSchema]:
        return []

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        self._note("on_turn_start", (turn_number, message))

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        self._note("queue_prefetch", (query, session_id))

    def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        self._note("on_pre_compress", messages)
        return "provider notes: the user likes tea"

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "", **kwargs: Any) -> None:
        self._note("on_delegation", (task, result, child_session_id))

    def on_session_switch(self, new_session_id: str, *, parent_session_id: str = "", reset: bool = False,
                          rewound: bool = False, **kwargs: Any) -> None:
        self._note("on_session_switch", (new_session_id, parent_session_id, reset))


class Minimal(MemoryProvider):
    name = "minimal"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        pass

    def tool_schemas(self) -> list[ToolSchema]:
        return []


def test_hooks_have_hermes_signatures_and_no_op_defaults(home: Path) -> None:
    provider = Minimal()
    assert provider.on_turn_start(1, "hi", model="x") is None
    assert provider.queue_prefetch("hi", session_id="s") is None
    assert provider.on_pre_compress([{"role": "user", "content": "x"}]) == ""
    assert provider.on_delegation("task", "result", child_session_id="c", extra=1) is None
    assert provider.on_session_switch("new", parent_session_id="old", reset=True, rewound=False) is None
    with MemoryManager(home=home, external=provider) as manager:
        session = manager.start_session("s1")
        session.prefetch("hello")
        session.sync_turn("hello", "hi")
        assert session.pre_compress([{"role": "user", "content": "hello"}]) == ""
        session.delegation("t", "r")
        session.switch("s2")


def test_session_calls_each_hook_where_hermes_does(home: Path) -> None:
    provider = RecordingProvider()
    with MemoryManager(home=home, external=provider) as manager:
        session = manager.start_session("s1")
        session.prefetch("first message")
        session.sync_turn("first message", "answer")
        session.prefetch("second message with key sk-abcdefghijklmnopqrstuvwx1234")
        manager.drain()
        assert provider.hook("on_turn_start")[0] == (1, "first message")
        turn2, message2 = provider.hook("on_turn_start")[1]
        assert turn2 == 2 and "sk-abcdefghijklmnopqrstuvwx1234" not in message2  # secrets masked
        assert provider.hook("queue_prefetch") == [("first message", "s1")]
        text = session.pre_compress([{"role": "user", "content": "my token is sk-abcdefghijklmnopqrstuvwx1234"},
                                     {"role": "assistant", "content": "noted"}])
        assert text == "provider notes: the user likes tea"
        sent = provider.hook("on_pre_compress")[0]
        assert [m["role"] for m in sent] == ["user", "assistant"]
        assert "sk-abcdefghijklmnopqrstuvwx1234" not in sent[0]["content"]
        session.delegation("find the bug", "it was a race", child_session_id="child-1")
        manager.drain()
        assert provider.hook("on_delegation") == [("find the bug", "it was a race", "child-1")]
        session.switch("s1-branch", reset=False)
        assert provider.hook("on_session_switch") == [("s1-branch", "s1", False)]
        assert session.id == "s1-branch"


def test_langchain_summarization_middleware_compaction_reaches_on_pre_compress(home: Path) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    from ironmem.adapters.langchain import IronMemoryMiddleware
    from ironmem.testing.langchain import ScriptedChatModel

    provider = RecordingProvider()
    with MemoryManager(home=home, external=provider) as manager:
        model = ScriptedChatModel([f"answer {i}" for i in range(8)])
        summarizer = ScriptedChatModel(["SUMMARY of the early turns"] * 8)
        middleware = IronMemoryMiddleware(manager)
        agent = create_agent(
            model,
            middleware=[SummarizationMiddleware(summarizer, trigger=("messages", 5), keep=("messages", 2)),
                        middleware],
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "t1"}}
        for i in range(4):
            agent.invoke({"messages": [("user", f"question number {i} about tea")]}, config)
        flushed = [m for call in provider.hook("on_pre_compress") for m in call]
        assert flushed, "the summarized messages never reached on_pre_compress"
        assert {"role": "user", "content": "question number 0 about tea"} in flushed
        assert {"role": "assistant", "content": "answer 0"} in flushed
        middleware.close()


def test_llama_index_memory_flush_reaches_on_pre_compress(home: Path) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.llms.types import ChatMessage

    from ironmem.adapters.llama_index import IronMemory

    provider = RecordingProvider()
    with MemoryManager(home=home, external=provider) as manager:
        memory = IronMemory.from_defaults(manager=manager, session_id="li", token_limit=60,
                                          chat_history_token_ratio=0.5, token_flush_size=20)

        async def run() -> None:
            for i in range(8):
                await memory.aput(ChatMessage(role="user", content=f"user message {i} about gardening and tea"))
                await memory.aput(ChatMessage(role="assistant", content=f"assistant reply {i} about gardening"))
            await memory.aget()

        asyncio.run(run())
        flushed = [m for call in provider.hook("on_pre_compress") for m in call]
        assert {"role": "user", "content": "user message 0 about gardening and tea"} in flushed
        text = " ".join(str(m.content) for m in memory.get())
        assert "provider notes" not in text  # the watcher adds nothing to the context
        memory.close()
