"""A driver that speaks Hermes's ``MemoryStore`` vocabulary to ironmem, through ironmem's public API only.

Hermes's tests call ``MemoryStore.add/replace/remove/apply_batch`` and the ``memory_tool()`` dispatcher; here
each of those becomes one ``memory`` tool call on a real :class:`ironmem.Session` over a real memory folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ironmem import MemoryManager
from ironmem.core.session import MAX_MEMORY_FAILURES_PER_TURN


class HermesStyleDriver:
    """Hermes's ``MemoryStore`` vocabulary mapped onto ``Session.handle_tool_call("memory", ...)``."""

    _MAX_CONSOLIDATION_FAILURES_PER_TURN = MAX_MEMORY_FAILURES_PER_TURN

    def __init__(self, home: Path, memory_char_limit: int = 2200, user_char_limit: int = 1375, **kwargs: Any):
        self.home = home
        self.manager = MemoryManager(home=home, memory_char_limit=memory_char_limit,
                                     user_char_limit=user_char_limit, **kwargs)
        self.session = self.manager.start_session("conformance")
        self.session.prefetch("first turn")

    # -- Hermes's MemoryStore surface --------------------------------------------------------
    def memory_tool(self, **args: Any) -> dict[str, Any]:
        return json.loads(self.session.handle_tool_call("memory", args))

    def add(self, target: str, content: str) -> dict[str, Any]:
        return self.memory_tool(action="add", target=target, content=content)

    def replace(self, target: str, old_text: str, content: str) -> dict[str, Any]:
        return self.memory_tool(action="replace", target=target, old_text=old_text, content=content)

    def remove(self, target: str, old_text: str) -> dict[str, Any]:
        return self.memory_tool(action="remove", target=target, old_text=old_text)

    def apply_batch(self, target: str, operations: list[dict[str, Any]]) -> dict[str, Any]:
        return self.memory_tool(target=target, operations=operations)

    def reset_consolidation_failures(self) -> None:
        """Hermes resets the breaker at a turn boundary; in ironmem a turn starts with ``prefetch``."""
        self.session.prefetch("next turn")

    def load_from_disk(self) -> None:
        """A fresh session: re-reads the files and freezes a new snapshot."""
        self.session.end()
        self.session = self.manager.start_session("conformance-reloaded")

    def _entries_for(self, target: str) -> list[str]:
        return list(self.manager.builtin.state(target).entries)

    @property
    def memory_entries(self) -> list[str]:
        return self._entries_for("memory")

    @property
    def user_entries(self) -> list[str]:
        return self._entries_for("user")

    def _path_for(self, target: str) -> Path:
        return self.home / ("USER.md" if target == "user" else "MEMORY.md")

    def format_for_system_prompt(self, target: str) -> str | None:
        snapshot = self.session.snapshot
        return self.session.system_prompt_block() if snapshot.entries.get(target) else None

    def close(self) -> None:
        self.manager.close()
