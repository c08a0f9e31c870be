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


def test_replay_sends_a_recalled_item_once_ephemeral_every_time(home) -> None:
    """Under replay the earlier fence is still in the request, so an item it showed is not sent again; under
    ephemeral the earlier fence is gone, so the item comes back whole."""
    with MemoryManager(home=home) as manager:
        manager.start_session("past").sync_turn("My cat Miso eats salmon kibble.", "Noted, salmon kibble.")
        texts: dict[str, list[str]] = {}
        for policy in ("replay", "ephemeral"):
            session = manager.start_session(f"now-{policy}")
            history = FenceHistory(policy)
            texts[policy] = [history.recall_once(session, f"m{i}", q)
                             for i, q in enumerate(("What does Miso eat?", "Remind me: what does Miso eat?"))]
        assert "salmon kibble" in texts["replay"][0] and "salmon kibble" in texts["ephemeral"][0]
        assert texts["ephemeral"][1] == texts["ephemeral"][0]
        assert texts["replay"][1] == ""  # shown by m0's fence, which every later request replays
        history = FenceHistory("replay", {"m0": texts["replay"][0], "m1": texts["replay"][1]})
        assert history.fenced_for("m1", current="m1") == ""
        assert "salmon kibble" in history.fenced_for("m0", current="m1")


def test_a_repeat_keeps_its_budget_slot_and_comes_back_after_compaction(home) -> None:
    # Lexical ranking: the four turns are near duplicates, whose dense order changes with the query's wording
    # ("again"); this test is about the repeat marks of the SAME two best items, so the ranking must not move.
    with MemoryManager(home=home, recall_budget=2, embeddings=False) as manager:
        past = manager.start_session("past")
        for n in range(4):
            past.sync_turn(f"Deploy window {n}: the staging deploy runs on Thursday {n}.", f"Thursday {n}, noted.")
        session = manager.start_session("now")
        first = session.prefetch("When is the staging deploy?")
        second = session.prefetch("When is the staging deploy again?")
        assert len(first.items) == 2 and not any(item.repeat for item in first.items)
        # The same two best items: marked as repeats, still counted against the 2-item budget, and
        # fresh() leaves nothing to send (no lower-ranked item fills their slots).
        assert [i.text for i in second.items] == [i.text for i in first.items]
        assert all(item.repeat for item in second.items) and not second.fresh()
        # The framework compacts history: the fences that showed them may be gone, so they are fresh again.
        session.pre_compress([{"role": "user", "content": "When is the staging deploy?"}])
        third = session.prefetch("When is the staging deploy?")
        assert third.items and not any(item.repeat for item in third.items)
