"""The built-in provider: MEMORY.md + USER.md, their tools, and the FTS5 index of entries and turns."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import MemoryFileError
from ..provider import MemoryProvider, ToolSchema
from ..security import scan
from .index import SearchIndex
from .storage import EntryFile, MemoryStorage, TurnIndex, open_storage
from .store import FileState, format_usage
from .tools import (
    MEMORY_TOOL,
    SEARCH_TOOL,
    TARGETS,
    Operation,
    OperationError,
    apply_operation,
    check_limit,
    parse_operations,
)

__all__ = ["BuiltinMemoryProvider", "WriteListener"]

log = logging.getLogger("ironmem.builtin")

#: Called after a successful write with (action, target, content).
WriteListener = Callable[[str, str, str], None]

FILE_NAMES = {"memory": "MEMORY.md", "user": "USER.md"}


def _result(**fields: Any) -> str:
    return json.dumps(fields, ensure_ascii=False)


class BuiltinMemoryProvider(MemoryProvider):
    """MEMORY.md (the agent's notes) and USER.md (who the user is) under ``home``, plus search.

    Always present in a :class:`~ironmem.MemoryManager`; it cannot be removed.

    Example:
        >>> import tempfile, json
        >>> p = BuiltinMemoryProvider(tempfile.mkdtemp())
        >>> json.loads(p.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Name: Ada"}))["success"]
        True
    """

    name = "builtin"

    def __init__(
        self,
        home: str | Path,
        *,
        memory_char_limit: int = 2200,
        user_char_limit: int = 1375,
        storage: str | MemoryStorage | None = None,
    ) -> None:
        self.home = Path(home).expanduser()
        self.home.mkdir(parents=True, exist_ok=True)
        self.state_dir = self.home / ".ironmem"
        self.state_dir.mkdir(exist_ok=True)
        self.limits = {"memory": memory_char_limit, "user": user_char_limit}
        #: Where entries and turns live: files + SQLite (default) or PostgreSQL (``storage="postgresql://..."``).
        self.storage: MemoryStorage = open_storage(storage, home=self.home)
        self.scope = ""  # the Hermes-default shared entries
        self.files: dict[str, EntryFile] = {
            target: self.storage.entry_file(self.scope, target, limit=self.limits[target]) for target in TARGETS
        }
        self.index: TurnIndex | SearchIndex = self.storage.index
        self._listeners: list[WriteListener] = []

    # -- contract -----------------------------------------------------------------------------
    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        for target in TARGETS:
            self.state(target)

    def tool_schemas(self) -> list[ToolSchema]:
        return [MEMORY_TOOL, SEARCH_TOOL]

    def add_write_listener(self, listener: WriteListener) -> None:
        self._listeners.append(listener)

    # -- state --------------------------------------------------------------------------------
    def state(self, target: str) -> FileState:
        """The file's current entries (read from disk) and keep the search index in step with them."""
        state = self.files[target].read()
        if state.corrupt:
            log.error("%s; a copy is at %s", state.corrupt, state.backup)
        else:
            self.index.sync_entries(target, state.entries)
        return state

    def usage(self, target: str) -> str:
        state = self.files[target].read()
        return format_usage(state.chars, self.limits[target])

    # -- tools --------------------------------------------------------------------------------
    def handle_tool_call(self, name: str, args: dict[str, Any], *, user_id: str | None = None) -> str:
        if name == MEMORY_TOOL.name:
            return self._memory_tool(args)
        if name == SEARCH_TOOL.name:
            return self._search_tool(args, user_id=user_id)
        return _result(success=False, error=f"the built-in provider has no tool {name!r}")

    def apply(self, operations: list[Operation]) -> dict[str, FileState]:
        """Apply ``operations`` all-or-nothing. Raises OperationError / MemoryFileError; nothing is written then."""
        targets = [t for t in TARGETS if any(op.target == t for op in operations)]
        for op in operations:
            if op.action in ("add", "replace"):
                verdict = scan(op.content)
                if verdict.blocked:
                    raise OperationError(
                        f"refused by the security scan ({verdict.reason}): {verdict.describe()}. Memory is shown "
                        "to the model in every future session, so it must not contain instructions, hidden text, "
                        "secrets or links that send data out. Rephrase it as a plain fact; nothing was written"
                    )
        changed: list[tuple[str, str, str]] = []  # (action, target, content) for the listeners

        def change(current: dict[str, FileState]) -> dict[str, list[str]]:
            # Runs under the storage's lock (and may run again after a lost database connection).
            changed.clear()
            entries = {t: list(s.entries) for t, s in current.items()}
            for op in operations:
                before = entries[op.target]
                entries[op.target], did_change = apply_operation(before, op)
                if not did_change:
                    continue
                if op.action == "add":
                    changed.append(("add", op.target, op.content))
                else:  # replace and remove name the entry that went away, so mirrors can delete it
                    gone = [e for e in before if e not in entries[op.target]]
                    changed.extend(("remove", op.target, e) for e in gone)
                    if op.action == "replace":
                        changed.append(("add", op.target, op.content))
            for target in targets:
                check_limit(entries[target], list(current[target].entries), self.limits[target], target)
            return entries

        record = [{"action": op.action, "target": op.target, "content": op.content, "old_text": op.old_text}
                  for op in operations]
        new_states = self.storage.transact(self.scope, targets, change, record=record)
        for target, state in new_states.items():
            self.index.sync_entries(target, state.entries)
        for action, target, content in changed:
            for listener in self._listeners:
                try:
                    listener(action, target, content)
                except Exception:  # a listener must never undo or fail a write that landed
                    log.exception("memory write listener failed")
        return new_states

    def _memory_tool(self, args: dict[str, Any]) -> str:
        try:
            operations = parse_operations(args)
            states = self.apply(operations)
        except OperationError as exc:
            return _result(success=False, error=str(exc), **exc.details)
        except MemoryFileError as exc:
            return _result(success=False, error=str(exc))
        usage = {t: format_usage(s.chars, self.limits[t]) for t, s in states.items()}
        if len(operations) == 1:
            op = operations[0]
            return _result(success=True, action=op.action, target=op.target, usage=usage[op.target],
                           entries=len(states[op.target].entries))
        return _result(success=True, applied=len(operations), usage=usage)

    def _search_tool(self, args: dict[str, Any], *, user_id: str | None) -> str:
        query = args.get("query") if isinstance(args, dict) else None
        if not isinstance(query, str) or not query.strip():
            return _result(success=False, error="session_search needs a non-empty 'query' string")
        limit = args.get("limit", 5)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 20:
            return _result(success=False, error="'limit' must be an integer from 1 to 20")
        hits = self.index.search(query, limit=limit, user_id=user_id, drop_stopwords=False)
        return _result(success=True, query=query, results=[h.to_dict() for h in hits])

    def shutdown(self) -> None:
        self.storage.close()
