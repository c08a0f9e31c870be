"""``IronStore``: a LangGraph ``BaseStore`` over ironmem's memory.

Namespaces map to ironmem's scopes (:mod:`ironmem.core.items`):

* ``("memories",)`` and ``("memories", user_id)`` hold the entries of ``MEMORY.md`` (the shared one, or
  ``user_id``'s own: a namespace naming a user never reaches the shared notes, so a session of that user sees
  them with ``memory_per_user``); ``("user",)`` and ``("user", user_id)`` those of ``USER.md``. An item put there IS a memory entry: it goes through the memory's write path (security
  scan, limits, the external provider's mirror), shows in the next session's frozen snapshot and in
  ``session_search``, for every client of the memory (LangChain middleware, LlamaIndex, ``ironmem mcp``). Entries
  written by those clients are items here too (key ``entry-<hash>``, value ``{"content": text}``).
* Every other namespace is an application's own data, kept in ironmem's item table beside the memory files.

``search`` ranks with ironmem's own ranking (BM25 over the folded, stemmed terms ``session_search`` uses; items
holding no word of the query are left out); ``filter`` follows LangGraph's JSON matching. The async methods run
the same code on a worker thread (``abatch``).

Example:
    >>> import tempfile
    >>> from ironmem import MemoryManager
    >>> store = IronStore(MemoryManager(home=tempfile.mkdtemp()))
    >>> store.put(("memories", "ada"), "tea", {"content": "Ada prefers green tea"})
    >>> [item.value["content"] for item in store.search(("memories", "ada"), query="tea")]
    ['Ada prefers green tea']
    >>> store.manager.start_session("s", user_id="ada", memory_per_user=True).system_prompt_block().count("green tea")
    1
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from ...core.builtin.tools import Operation
from ...core.items import ItemTable, StoredItem, entry_namespace, item_text, rank_items
from ...core.manager import MemoryManager
from ...core.portable import header

__all__ = ["IronStore", "store_records"]

_CANONICAL = {"memory": "memories", "user": "user"}  # target -> the namespace name listed for it


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _entry_key(text: str) -> str:
    return "entry-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _matches(value: Any, filter_: dict[str, Any] | None) -> bool:
    if not filter_:
        return True
    from langgraph.store.memory import _compare_values  # LangGraph's own JSON matching, so filters agree

    return all(_compare_values(value.get(k), v) for k, v in filter_.items())


class IronStore(BaseStore):
    """A LangGraph store whose memory namespaces are ironmem's memory (see the module doc).

    ``path`` is the item table (default ``<home>/.ironmem/items.db``).

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> store = IronStore(MemoryManager(home=tempfile.mkdtemp()))
        >>> store.put(("docs",), "a", {"text": "hello"})
        >>> store.get(("docs",), "a").value
        {'text': 'hello'}
    """

    supports_ttl = False

    def __init__(self, manager: MemoryManager, *, path: str | Path | None = None) -> None:
        self.manager = manager
        self.table = ItemTable(path or manager.home / ".ironmem" / "items.db", read_only=manager.builtin.read_only)
        self._lock = threading.RLock()

    # -- the memory namespaces ------------------------------------------------------------------------
    def _scope(self, target: str, user: str | None) -> str:
        # A namespace that names a user is that user's own file, never the shared notes (privacy by construction).
        return self.manager.scopes_for(user, memory_per_user=True)[target]

    def _entry_items(self, namespace: tuple[str, ...]) -> list[StoredItem]:
        """The entries of the file behind ``namespace``, each as an item (its recorded key and value when the
        table has them, else ``entry-<hash>`` and ``{"content": text}``)."""
        mapped = entry_namespace(namespace)
        assert mapped is not None
        target, user = mapped
        entry_file = self.manager.builtin.file(target, self._scope(target, user))
        state = entry_file.read()
        path = entry_file.path
        stamp = path.stat().st_mtime if isinstance(path, Path) and path.exists() else 0.0
        recorded: dict[str, StoredItem] = {}
        for item in self.table.items(namespace):
            if item.namespace == namespace:
                recorded.setdefault(item_text(item.value), item)
        out = []
        for text in state.entries:
            known = recorded.get(text)
            out.append(known if known is not None else
                       StoredItem(namespace, _entry_key(text), {"content": text}, stamp, stamp))
        return out

    def _memory_namespaces(self) -> list[tuple[str, ...]]:
        """The memory namespaces that hold entries now: shared files, then each user scope with its own."""
        out: list[tuple[str, ...]] = []
        for target, name in _CANONICAL.items():
            if self.manager.builtin.file(target, "").read().entries:
                out.append((name,))
            for scope in self.manager.builtin.known_scopes():
                if self._scope(target, scope) == scope and self.manager.builtin.file(target, scope).read().entries:
                    out.append((name, scope))
        for ns in self.table.namespaces():  # aliases ("memory", "profile") and namespaces of users with no file
            if entry_namespace(ns) is not None and ns not in out and self._entry_items(ns):
                out.append(ns)
        return out

    # -- operations -------------------------------------------------------------------------------------
    def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        if entry_namespace(namespace) is not None:
            found = next((i for i in self._entry_items(namespace) if i.key == op.key), None)
        else:
            found = self.table.get(namespace, op.key)
        return None if found is None else Item(value=found.value, key=found.key, namespace=found.namespace,
                                               created_at=_dt(found.created_at), updated_at=_dt(found.updated_at))

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        mapped = entry_namespace(namespace)
        if mapped is None:
            if op.value is None:
                self.table.delete(namespace, op.key)
            else:
                self.table.put(namespace, op.key, dict(op.value))
            return
        target, user = mapped
        scopes = {target: self._scope(target, user)}
        current = next((i for i in self._entry_items(namespace) if i.key == op.key), None)
        old = item_text(current.value) if current is not None else None
        if op.value is None:
            if old is not None:
                self.manager.builtin.apply([Operation("remove", target, old_text=old)], scopes=scopes)
            self.table.delete(namespace, op.key)
            return
        text = item_text(op.value)
        if old is None:
            self.manager.builtin.apply([Operation("add", target, content=text)], scopes=scopes)
        elif old != text:
            self.manager.builtin.apply([Operation("replace", target, content=text, old_text=old)], scopes=scopes)
        if current is not None and current.key != op.key:  # pragma: no cover - keys are unique per namespace
            self.table.delete(namespace, current.key)
        self.table.put(namespace, op.key, dict(op.value))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        n = len(prefix)
        candidates: list[StoredItem] = []
        seen: set[tuple[str, str, str]] = set()
        for ns in self._memory_namespaces():
            if ns[:n] != prefix:
                continue
            target, user = entry_namespace(ns) or ("", None)
            scope = self._scope(target, user)
            for item in self._entry_items(ns):
                mark = (scope, target, item_text(item.value))
                if mark not in seen:  # ("memories",) and ("memories", "ada") may be the same shared file
                    seen.add(mark)
                    candidates.append(item)
        candidates += [i for i in self.table.items(prefix) if entry_namespace(i.namespace) is None]
        candidates = [i for i in candidates if _matches(i.value, op.filter)]
        ranked = rank_items(candidates, op.query)
        return [SearchItem(namespace=i.namespace, key=i.key, value=i.value, created_at=_dt(i.created_at),
                           updated_at=_dt(i.updated_at), score=i.score)
                for i in ranked[op.offset:op.offset + op.limit]]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        from langgraph.store.memory import _does_match  # LangGraph's own prefix/suffix/wildcard matching

        spaces = {ns for ns in self.table.namespaces() if entry_namespace(ns) is None}
        spaces.update(self._memory_namespaces())
        found = [ns for ns in spaces if all(_does_match(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            found = list({ns[: op.max_depth] for ns in found})
        return sorted(found)[op.offset:op.offset + op.limit]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` with LangGraph's batch semantics (those of its ``InMemoryStore``): reads see the store as it
        was before the batch, then the writes land, the last put of a ``(namespace, key)`` winning."""
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        with self._lock:
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(self._get(op))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, PutOp):
                    puts.pop((tuple(op.namespace), op.key), None)
                    puts[(tuple(op.namespace), op.key)] = op
                    results.append(None)
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                else:
                    raise TypeError(f"IronStore cannot run {type(op).__name__}")
            for put in puts.values():
                self._put(put)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` on a worker thread (SQLite and file locks block)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def close(self) -> None:
        """Close the item table (the manager stays open: it is the caller's)."""
        self.table.close()


def store_records(store: BaseStore, *, page: int = 1000) -> Iterator[dict[str, Any]]:
    """Every item of any LangGraph ``store`` as ``store_item`` records of ironmem's export format
    (:mod:`ironmem.core.portable`); items in a memory namespace (``("memories", user)``...) become entries on
    import."""
    yield header()
    namespaces: list[tuple[str, ...]] = []
    while True:
        batch = store.list_namespaces(limit=page, offset=len(namespaces))
        namespaces += batch
        if len(batch) < page:
            break
    for ns in namespaces:
        offset = 0
        while True:
            items = store.search(ns, limit=page, offset=offset)
            for item in items:
                if tuple(item.namespace) == tuple(ns):
                    yield {"kind": "store_item", "namespace": list(item.namespace), "key": item.key,
                           "value": item.value, "created_at": item.created_at.timestamp(),
                           "updated_at": item.updated_at.timestamp()}
            if len(items) < page:
                break
            offset += page

