"""A raising or hanging external provider never breaks the turn or the built-in layer."""

from __future__ import annotations

import json
import time

from ironmem import MemoryManager, ToolSchema
from ironmem.testing.faulty import HangingProvider, RaisingProvider


class HangingWithSlowSync(HangingProvider):
    """Hangs in prefetch (until released); syncs slowly and records the order of the turns it got."""

    def __init__(self) -> None:
        super().__init__("hanging")
        self.synced: list[str] = []

    def tool_schemas(self) -> list[ToolSchema]:
        return []

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        time.sleep(0.05)
        self.synced.append(user)


def test_raising_provider_is_isolated(home) -> None:
    with MemoryManager(home=home, external=RaisingProvider("exploding"), prefetch_timeout=1.0) as manager:
        session = manager.start_session("s1")
        assert "MEMORY" in session.system_prompt_block()
        assert json.loads(session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Name: Ana"}))["success"]
        assert "Name: Ana" in session.prefetch("hello").fenced()
        error = json.loads(session.handle_tool_call("exploding_search", {}))
        assert error["success"] is False and "ConnectionError: backend down" in error["error"]
        session.sync_turn("hello", "hi")
        session.end()
        status = {p["name"]: p for p in manager.status()["providers"]}
        assert status["builtin"]["state"] == "active"
        assert status["exploding"]["state"] == "degraded"
        assert "backend down" in status["exploding"]["reason"]


def test_hanging_prefetch_is_bounded_and_sync_is_ordered(home) -> None:
    hanging = HangingWithSlowSync()
    with MemoryManager(home=home, external=hanging, prefetch_timeout=0.3) as manager:
        session = manager.start_session("s1")
        session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "Build uses make"})
        started = time.perf_counter()
        recall = session.prefetch("how do we build?")
        elapsed = time.perf_counter() - started
        assert elapsed < 0.3 + 0.5
        assert "Build uses make" in recall.fenced() and "too late" not in recall.fenced()
        # A second prefetch while the first call still hangs returns at once instead of stacking threads.
        started = time.perf_counter()
        session.prefetch("again")
        assert time.perf_counter() - started < 0.3
        assert "timed out" in manager.health("hanging").reason or "still running" in manager.health("hanging").reason
        for i in range(5):
            session.sync_turn(f"turn {i}", "ok")  # returns at once; the provider is slow
        session.end()  # drains the background queue
        assert hanging.synced == [f"turn {i}" for i in range(5)]
        hanging.release()


def test_a_failing_index_write_does_not_break_the_turn(manager: MemoryManager) -> None:
    session = manager.start_session("s1")
    manager.builtin.index.close()  # every later write to the index fails
    session.sync_turn("hello", "hi")  # logged and reported, not raised
    assert session.turns_synced == 0
    builtin = manager.health("builtin")
    assert builtin.state == "degraded" and "could not index" in builtin.reason
