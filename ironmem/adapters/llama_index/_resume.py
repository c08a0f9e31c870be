"""What a conversation needs to resume in another process, kept beside its chat history.

A stock ``Memory`` keeps the chat history in a SQL database (``history_path`` / ``async_database_uri``); a new
process that reopens it gets the messages back, but not what IronMemory sent with them: the frozen snapshot the
session started with (rule 3) and the fence of every user message (rule 2, replayed byte for byte). Without
them the first request after a restart would render a new snapshot and drop the old fences, and the provider's
prefix cache would miss from the first byte.

So IronMemory keeps them in the same database, in a stock ``SQLAlchemyChatStore`` table of its own
(``<history table>_ironmem``), under the session id: an append-only log of small JSON records, one per event
(the session started with this snapshot and user; user message K recalled this text; the turn of K was synced).
Each record is one insert, so a crash loses at most the event in flight, never the log. Translation only: what a
snapshot or a fence contains is decided by the core; this module stores and returns it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

__all__ = ["ResumeLog", "Resumed"]

_IN_MEMORY_URIS = {None, "", "sqlite+aiosqlite:///:memory:", "sqlite+aiosqlite://"}
_VERSION = 1


@dataclass
class Resumed:
    """A conversation's saved state: whose it is, its frozen snapshot, its recalls and synced turns."""

    user_id: str | None
    snapshot: dict[str, Any]
    recalls: dict[str, str] = field(default_factory=dict)
    synced: set[str] = field(default_factory=set)


class ResumeLog:
    """The resume records of one session, in the database of its chat history."""

    def __init__(self, store: SQLAlchemyChatStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    @classmethod
    def beside(cls, history: BaseMemory, session_id: str) -> ResumeLog | None:
        """The log for ``history``, or None when the history does not outlive this process (in-memory SQLite,
        or a memory that is not a SQL-backed ``Memory``)."""
        if not isinstance(history, Memory):
            return None
        sql = history.sql_store
        uri = getattr(sql, "async_database_uri", None)
        if not isinstance(sql, SQLAlchemyChatStore) or uri in _IN_MEMORY_URIS:
            return None
        # No pooled connections: a sync caller runs each operation on a loop of its own (asyncio_run), and a
        # pooled aiosqlite/asyncpg connection must not outlive the loop it was made on.
        engine = create_async_engine(str(uri), poolclass=NullPool)
        store = SQLAlchemyChatStore(
            table_name=f"{sql.table_name}_ironmem", async_database_uri=str(uri), async_engine=engine,
            db_schema=sql.db_schema,
        )
        return cls(store, session_id)

    async def aload(self) -> Resumed | None:
        """The saved state, or None when this session has none yet."""
        resumed: Resumed | None = None
        for message in await self.store.get_messages(self.session_id):
            try:
                record = json.loads(message.content or "")
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("v") != _VERSION:
                continue
            if "snapshot" in record:
                resumed = Resumed(record.get("user_id"), record["snapshot"])
            elif resumed is None:
                continue
            elif "recall" in record:
                resumed.recalls[str(record["recall"])] = str(record.get("text", ""))
            elif "synced" in record:
                resumed.synced.add(str(record["synced"]))
            elif record.get("reset"):
                resumed.recalls.clear()
                resumed.synced.clear()
        return resumed

    async def _append(self, record: dict[str, Any]) -> None:
        text = json.dumps({"v": _VERSION, **record}, ensure_ascii=False)
        await self.store.add_message(self.session_id, ChatMessage(role=MessageRole.SYSTEM, content=text))

    async def astarted(self, user_id: str | None, snapshot: dict[str, Any]) -> None:
        """The session started with this user and this frozen snapshot."""
        await self._append({"user_id": user_id, "snapshot": snapshot})

    async def arecalled(self, key: str, text: str) -> None:
        """User message ``key`` was recalled ``text`` (unfenced; "" when nothing was recalled)."""
        await self._append({"recall": key, "text": text})

    async def asynced(self, keys: list[str]) -> None:
        for key in keys:
            await self._append({"synced": key})

    async def areset(self) -> None:
        """The chat history was cleared: the recalls and synced turns go with it (the snapshot stays)."""
        await self._append({"reset": True})

    async def aclose(self) -> None:
        engine = getattr(self.store, "_async_engine", None)
        if engine is not None:
            await engine.dispose()
