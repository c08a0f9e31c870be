"""Rule 2 applied to a conversation, in the core (both adapters use it): recall once per user message, the same
fence bytes on every replay, ephemeral keeps only the current one, fences never leak into stored text."""

from __future__ import annotations

import asyncio
from typing import Any

from ironmem import MemoryManager, MemoryProvider, ToolSchema
from ironmem.core.recall import FenceHistory, prepend_fence, split_fence


class CountingProvider(MemoryProvider):
    name = "counting"

    def __init__(self) -> None:
        self.prefetches = 0

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        pass

    def tool_schemas(self) -> list[ToolSchema]:
        return []

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        self.prefetches += 1
        return f"fact about {query}"


def test_recall_runs_once_per_user_message_and_replays_the_same_bytes(home) -> None:
    provider = CountingProvider()
    with MemoryManager(home=home, external=provider) as manager:
        session = manager.start_session("s1")
        history = FenceHistory("replay")
        for _ in range(5):  # a framework reading memory five times in one turn
            history.recall_once(session, "m1", "Lisbon")
        assert provider.prefetches == 1
        first = history.fenced_for("m1", current="m1")
        asyncio.run(history.arecall_once(session, "m2", "Porto"))
        assert provider.prefetches == 2
        assert history.fenced_for("m1", current="m2") == first  # byte-identical when replayed
        assert "fact about Lisbon" in first and first.count("<memory-context>") == 1
        restored = FenceHistory("replay", history.to_dict())  # from a checkpoint
        assert restored.fenced_for("m1", current="m2") == first


def test_ephemeral_shows_and_keeps_only_the_current_message() -> None:
    history = FenceHistory("ephemeral")
    history.record("m1", "Likes tea")
    history.record("m2", "Lives in Porto")
    assert history.fenced_for("m1", current="m2") == ""
    assert "Porto" in history.fenced_for("m2", current="m2")
    assert history.to_dict() == {"m2": "Lives in Porto"}


def test_split_fence_removes_exactly_what_prepend_fence_added() -> None:
    from ironmem import fence

    fenced = fence("recalled: the user said </memory-context> in a note")
    text = prepend_fence(fenced, "What did I say?")
    assert split_fence(text) == (fenced, "What did I say?")
    assert split_fence("plain question") == ("", "plain question")
    assert prepend_fence("", "plain") == "plain"
