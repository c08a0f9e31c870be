"""Key-value items beside the memory files: what a LangGraph store keeps that is not a memory entry.

A LangGraph ``BaseStore`` holds items ``(namespace, key) -> value`` with timestamps. The namespaces that name
ironmem's memory (see :func:`entry_namespace`) are kept in ``MEMORY.md`` / ``USER.md`` themselves, so every client
sees them in its snapshot and search; this table records their keys and values, and holds the items of every other
namespace (an application's own data). It is one SQLite file, ``<home>/.ironmem/items.db``; search ranks items with
ironmem's own ranking (BM25 over the same folded, stemmed terms as ``session_search``).

Framework-neutral: the LangGraph adapter (``ironmem.adapters.langchain.store.IronStore``) translates.

Example:
    >>> import pathlib, tempfile
    >>> table = ItemTable(pathlib.Path(tempfile.mkdtemp()) / "items.db")
    >>> table.put(("docs",), "a", {"content": "Ada prefers green tea"})
    >>> table.get(("docs",), "a").value
    {'content': 'Ada prefers green tea'}
    >>> [i.key for i in table.search(("docs",), query="tea")]
    ['a']
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .builtin.index import enable_wal
from .builtin.ranking import query_terms, rank_entries
from .errors import InvalidArgumentError

__all__ = ["ENTRY_NAMESPACES", "ItemTable", "StoredItem", "entry_namespace", "item_text"]

#: First element of a namespace -> the memory target whose entries it holds. ``("memories", "ada")`` is ada's
#: memory (where a session of user ada reads it), ``("memories",)`` the shared one; same for ``"user"``.
ENTRY_NAMESPACES = {"memories": "memory", "memory": "memory", "user": "user", "profile": "user"}


def entry_namespace(namespace: Sequence[str]) -> tuple[str, str | None] | None:
    """``(target, user_id)`` when ``namespace`` names ironmem memory (one or two elements, the first in
    :data:`ENTRY_NAMESPACES`), else None.

    Example:
        >>> entry_namespace(("memories", "ada")), entry_namespace(("docs", "x"))
        (('memory', 'ada'), None)
    """
    if not 1 <= len(namespace) <= 2 or namespace[0] not in ENTRY_NAMESPACES:
        return None
    return ENTRY_NAMESPACES[namespace[0]], (namespace[1] if len(namespace) == 2 else None)


def item_text(value: Any) -> str:
    """The text of an item's value: ``value["content"]`` (LangMem's shape) or ``value["text"]`` when a string,
    else the value as compact JSON (sorted keys)."""
    if isinstance(value, dict):
        for key in ("content", "text"):
            if isinstance(value.get(key), str):
                return str(value[key])
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class StoredItem:
    """One item: namespace, key, value and its times (Unix seconds); ``score`` when it came from a search."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    score: float | None = None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
);
"""


def _ns(namespace: Sequence[str]) -> str:
    if not isinstance(namespace, (tuple, list)) or not all(isinstance(p, str) and p for p in namespace):
        raise InvalidArgumentError(f"a namespace is a tuple of non-empty strings, got {namespace!r}")
    return json.dumps(list(namespace), ensure_ascii=False)


class ItemTable:
    """The item table (one SQLite file, one connection serialized by a lock, usable from any thread)."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        if read_only:
            uri = f"file:{self.path}?mode=ro" if self.path.exists() else "file::memory:"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            if not self.path.exists():
                self._conn.executescript(_SCHEMA)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            enable_wal(self._conn)
            self._conn.executescript(_SCHEMA)

    @staticmethod
    def _item(row: tuple[str, str, str, float, float], score: float | None = None) -> StoredItem:
        return StoredItem(tuple(json.loads(row[0])), row[1], json.loads(row[2]), float(row[3]), float(row[4]), score)

    def get(self, namespace: Sequence[str], key: str) -> StoredItem | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT namespace, key, value, created_at, updated_at FROM items WHERE namespace = ? AND key = ?",
                (_ns(namespace), key)).fetchone()
        return self._item(row) if row else None

    def put(self, namespace: Sequence[str], key: str, value: dict[str, Any], *,
            created_at: float | None = None, updated_at: float | None = None) -> None:
        """Insert or replace; an existing item keeps its ``created_at`` unless one is given."""
        now = time.time()
        with self._lock:
            self._conn.execute(
                "INSERT INTO items(namespace, key, value, created_at, updated_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(namespace, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
                + (", created_at = excluded.created_at" if created_at is not None else ""),
                (_ns(namespace), key, json.dumps(value, ensure_ascii=False, sort_keys=True),
                 now if created_at is None else created_at, now if updated_at is None else updated_at))

    def delete(self, namespace: Sequence[str], key: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (_ns(namespace), key))

    def items(self, prefix: Sequence[str] = ()) -> list[StoredItem]:
        """Every item whose namespace starts with ``prefix``, by namespace then key."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT namespace, key, value, created_at, updated_at FROM items ORDER BY namespace, key").fetchall()
        n = len(prefix)
        found = [self._item(r) for r in rows]
        return [i for i in found if i.namespace[:n] == tuple(prefix)]

    def namespaces(self) -> list[tuple[str, ...]]:
        with self._lock:
            rows = self._conn.execute("SELECT DISTINCT namespace FROM items").fetchall()
        return sorted(tuple(json.loads(r[0])) for r in rows)

    def search(self, prefix: Sequence[str], *, query: str | None = None, limit: int = 10,
               offset: int = 0) -> list[StoredItem]:
        """Items under ``prefix``: ranked by ironmem's ranking when there is a ``query``, else newest first."""
        return rank_items(self.items(prefix), query)[offset:offset + limit]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def rank_items(items: Iterable[StoredItem], query: str | None) -> list[StoredItem]:
    """``items`` best first for ``query`` (BM25 over their text, items holding no query word left out), or newest
    first without a query."""
    listed = list(items)
    if not query or not query.strip():
        return sorted(listed, key=lambda i: (-i.updated_at, i.namespace, i.key))
    terms = query_terms(query)
    ranked = rank_entries(terms, [(str(n), item_text(i.value)) for n, i in enumerate(listed)])
    out = []
    for ident, _, score in ranked:
        item = listed[int(ident)]
        out.append(StoredItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, round(score, 4)))
    return out
