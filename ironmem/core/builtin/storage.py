"""Where the built-in provider keeps its entries and its turn index: the storage interface and the file backend.

Two backends implement :class:`MemoryStorage`:

- :class:`FileStorage` (the default): ``MEMORY.md`` / ``USER.md`` in the Hermes format under the memory home, and
  the SQLite FTS5 index in ``<home>/.ironmem/search.db``. Nothing on disk changes compared with earlier releases;
  this class is a thin adapter over :class:`~ironmem.core.builtin.store.MemoryFile` and
  :class:`~ironmem.core.builtin.index.SearchIndex`.
- :class:`~ironmem.core.builtin.postgres.PostgresStorage` (``storage: postgresql://...``): one database shared by
  agents on many machines.

The vocabulary:

- **scope**: whose entries. ``""`` is the Hermes-default pair of shared files; any other string is a user id
  (per-user memory).
- **target**: ``"memory"`` (the agent's notes) or ``"user"`` (the user profile).
- **transact**: the one write primitive. It locks every (scope, target) the write touches, always in the same
  order, reads the current entries *under the lock*, calls ``change`` (which applies the operations and checks
  the character limits, so limits are enforced under the lock), and stores the result atomically, or nothing
  when ``change`` raises. :meth:`MemoryStorage.apply` builds add / replace / remove / batches on top of it.
- **index**: the turn index (``add_turn``, ``search``, ``turn_count``, ...) with the interface of
  :class:`~ironmem.core.builtin.index.SearchIndex`, so the session and the tools never know which backend runs.

Example:
    >>> import tempfile
    >>> from ironmem.core.builtin.tools import Operation
    >>> storage = open_storage(None, home=tempfile.mkdtemp())
    >>> states = storage.apply("", [Operation("add", "user", "Name: Ada")], {"memory": 2200, "user": 1375})
    >>> storage.read("", "user").entries
    ('Name: Ada',)
    >>> storage.close()
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import MemoryFileError, StorageError
from .archive import ArchiveFile, ArchiveState, Record
from .index import SearchHit, SearchIndex
from .private import prepare_home
from .scope import DEFAULT_SCOPE, USERS_DIR, normalize_scope, scope_folder
from .store import FileState, MemoryFile
from .tools import Operation, apply_operation, check_limit

__all__ = [
    "EntryFile",
    "FileStorage",
    "MemoryStorage",
    "StorageError",
    "TurnIndex",
    "open_storage",
    "FILE_NAMES",
]

FILE_NAMES = {"memory": "MEMORY.md", "user": "USER.md"}

#: ``change`` of :meth:`MemoryStorage.transact`: current states (read under the lock) -> new entry lists.
Change = Callable[[dict[str, FileState]], dict[str, list[str]]]
#: ``archive`` of :meth:`MemoryStorage.transact_scoped`: called after ``change``, the archive records to store in the
#: same write (``{target: records}``; see :mod:`ironmem.core.builtin.archive`).
ArchiveRecords = Callable[[], Mapping[str, Sequence[Record]]]


@runtime_checkable
class EntryFile(Protocol):
    """One (scope, target) as the rest of the core reads it: ``provider.files[target]``."""

    limit: int

    @property
    def path(self) -> Any:  # a Path for files, a description string for a database
        ...

    def read(self) -> FileState:
        """The current entries (no lock; a reader sees a whole write or none of it)."""
        ...


@runtime_checkable
class TurnIndex(Protocol):
    """The turn and entry search both backends offer (``provider.index``)."""

    def add_turn(self, session_id: str, user: str, assistant: str, *, user_id: str | None,
                 ts: float | None = None) -> int: ...

    def add_turns(self, rows: Iterable[tuple[str, str | None, float, str, str]]) -> None: ...

    def turn_count(self, session_id: str | None = None) -> int: ...

    def sync_entries(self, target: str, entries: Iterable[str]) -> None: ...

    def search(self, query: str, *, limit: int = 5, kinds: tuple[str, ...] = ("memory", "user", "turn"),
               user_id: str | None = None, exclude_session: str | None = None,
               drop_stopwords: bool = True) -> list[SearchHit]: ...

    def clear_caches(self) -> None: ...

    def close(self) -> None: ...


class MemoryStorage(ABC):
    """The storage interface of the built-in provider (see the module docstring for the vocabulary)."""

    #: ``"files"`` or ``"postgresql"``: shown by ``status``.
    kind: str = ""

    @property
    @abstractmethod
    def index(self) -> TurnIndex:
        """The turn index (and entry search)."""

    @abstractmethod
    def entry_file(self, scope: str, target: str, *, limit: int) -> EntryFile:
        """The reader of one (scope, target) (``provider.files[target]``)."""

    @abstractmethod
    def read(self, scope: str, target: str) -> FileState:
        """The current entries of (scope, target), without locking."""

    @abstractmethod
    def transact(self, scope: str, targets: Sequence[str], change: Change, *, record: Any = None) -> dict[str, FileState]:
        """Lock ``targets`` of ``scope`` (sorted order), read them, apply ``change``, store the result atomically.

        ``change`` may raise to abort: nothing is stored then and the exception propagates. ``change`` may be
        called more than once (a backend retries after a lost connection), so it must not have side effects
        beyond its result. ``record`` (JSON-able) describes the write for the backend's write log, if it has one.
        Returns the new state of every target.
        """

    def transact_scoped(
        self, scopes: Mapping[str, str], change: Change, *, record: Any = None, archive: ArchiveRecords | None = None
    ) -> dict[str, FileState]:
        """:meth:`transact` over targets that may sit in different scopes (``{target: scope}``), as one
        all-or-nothing write: a batch touching the shared MEMORY.md and a user's own USER.md. ``archive`` gives
        the archive records stored with the write (before the entries, under the same locks).

        This default handles one scope without archive records; backends override it.
        """
        distinct = set(scopes.values())
        if len(distinct) > 1:
            raise StorageError(f"{type(self).__name__} cannot write several scopes in one transaction")
        if archive is not None:
            raise StorageError(f"{type(self).__name__} keeps no archive")
        scope = distinct.pop() if distinct else ""
        return self.transact(scope, list(scopes), change, record=record)

    def archive_state(self, scope: str, target: str) -> ArchiveState:
        """The folded archive log of (scope, target) (:class:`~ironmem.core.builtin.archive.ArchiveState`)."""
        return ArchiveState()

    def archive_records(self, scope: str, target: str) -> list[Record]:
        """Every archive record of (scope, target), oldest first."""
        return []

    def migrate(self) -> None:
        """Create or upgrade the storage's schema (idempotent; safe from many processes at once)."""

    def describe(self) -> str:
        """Where the memory lives, for ``status`` (never contains a password)."""
        return self.kind

    @abstractmethod
    def close(self) -> None:
        """Release connections and files."""

    # -- built on transact ---------------------------------------------------------------------
    def apply(
        self, scope: str, operations: Sequence[Operation], limits: Mapping[str, int]
    ) -> dict[str, FileState]:
        """Apply ``operations`` (add / replace / remove, one or a batch) all-or-nothing, limits checked under
        the lock. Raises :class:`~ironmem.core.builtin.tools.OperationError` (nothing written) when one cannot
        apply or the result is over a limit."""
        targets = sorted({op.target for op in operations})

        def change(current: dict[str, FileState]) -> dict[str, list[str]]:
            entries = {t: list(s.entries) for t, s in current.items()}
            for op in operations:
                entries[op.target], _ = apply_operation(entries[op.target], op)
            for target in targets:
                check_limit(entries[target], list(current[target].entries), limits[target], target)
            return entries

        return self.transact(scope, targets, change, record=[asdict(op) for op in operations])

    def __enter__(self) -> MemoryStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileStorage(MemoryStorage):
    """The default backend: Hermes-format files under ``home`` plus the SQLite index (unchanged on disk).

    Scope ``""`` is ``<home>/MEMORY.md`` and ``<home>/USER.md``; another scope (a user id) lives in
    ``<home>/users/<slug>-<hash>/`` (:func:`~ironmem.core.builtin.scope.scope_folder`), the same layout the
    built-in provider uses. Text added to a file by hand is kept as entries of its own (with a ``.bak`` copy).

    Example:
        >>> import tempfile
        >>> storage = FileStorage(tempfile.mkdtemp())
        >>> storage.transact("", ["memory"], lambda cur: {"memory": ["likes tea"]})["memory"].entries
        ('likes tea',)
        >>> storage.close()
    """

    kind = "files"

    def __init__(self, home: str | Path, *, read_only: bool = False) -> None:
        self.home = Path(home).expanduser()
        self.state_dir = self.home / ".ironmem"
        #: Opened for inspection: nothing under ``home`` is created or changed (see :class:`SearchIndex`).
        self.read_only = read_only
        if not read_only:
            prepare_home(self.home, self.state_dir)
        self._files: dict[tuple[str, str], MemoryFile] = {}
        self._archives: dict[tuple[str, str], ArchiveFile] = {}
        self._index = SearchIndex(self.state_dir / "search.db", read_only=read_only)

    @property
    def index(self) -> SearchIndex:
        return self._index

    def folder(self, scope: str) -> Path:
        """The folder holding the files of ``scope``."""
        scope = normalize_scope(scope)
        return self.home if scope == DEFAULT_SCOPE else self.home / USERS_DIR / scope_folder(scope)

    def _file(self, scope: str, target: str, limit: int | None = None) -> MemoryFile:
        if target not in FILE_NAMES:
            raise StorageError(f"unknown memory target {target!r}; use 'memory' or 'user'")
        scope = normalize_scope(scope)
        key = (scope, target)
        found = self._files.get(key)
        if found is None:
            folder = self.folder(scope)
            state_dir = folder / ".ironmem"
            found = MemoryFile(folder / FILE_NAMES[target], limit=limit or 0, state_dir=state_dir,
                               read_only=self.read_only)
            self._files[key] = found
        if limit is not None:
            found.limit = limit
        return found

    def entry_file(self, scope: str, target: str, *, limit: int) -> MemoryFile:
        return self._file(scope, target, limit)

    def read(self, scope: str, target: str) -> FileState:
        return self._file(scope, target).read()

    def transact(self, scope: str, targets: Sequence[str], change: Change, *, record: Any = None) -> dict[str, FileState]:
        return self.transact_scoped({t: scope for t in targets}, change, record=record)

    def _archive(self, scope: str, target: str) -> ArchiveFile:
        key = (normalize_scope(scope), target)
        found = self._archives.get(key)
        if found is None:
            found = self._archives[key] = ArchiveFile(self._file(scope, target).path)
        return found

    def archive_state(self, scope: str, target: str) -> ArchiveState:
        return self._archive(scope, target).state()

    def archive_records(self, scope: str, target: str) -> list[Record]:
        return self._archive(scope, target).all_records()

    def transact_scoped(
        self, scopes: Mapping[str, str], change: Change, *, record: Any = None, archive: ArchiveRecords | None = None
    ) -> dict[str, FileState]:
        ordered = sorted(set(scopes))
        files = {t: self._file(scopes[t], t) for t in ordered}
        with contextlib.ExitStack() as stack:
            # Lock every file the write touches, always in the same order, so two batches cannot deadlock.
            current = {t: stack.enter_context(files[t].locked()) for t in ordered}
            for target, state in current.items():
                if state.corrupt:
                    raise MemoryFileError(
                        f"{state.corrupt}. A copy is at {state.backup}. Fix or delete {files[target].path} "
                        "and retry; ironmem will not overwrite a file it cannot parse"
                    )
            new_entries = change(dict(current))
            for target, records in (archive() if archive is not None else {}).items():
                self._archive(scopes[target], target).append(list(records))  # before the file (see archive.py)
            out: dict[str, FileState] = {}
            for target in ordered:
                state = current[target]
                entries = list(new_entries.get(target, state.entries))
                if entries != list(state.entries) or state.hand_edits:
                    # like=state: keeps the line endings, saves a .bak copy when hand edits were found
                    out[target] = files[target].write_entries(entries, like=state)
                else:
                    out[target] = state
        return out

    def describe(self) -> str:
        return f"files in {self.home}"

    def close(self) -> None:
        self._index.close()


def is_postgres_url(value: str) -> bool:
    return value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def open_storage(spec: str | MemoryStorage | None, *, home: str | Path, read_only: bool = False) -> MemoryStorage:
    """The storage named by ``spec``: ``None`` / ``"files"`` (files + SQLite under ``home``), a
    ``postgresql://`` URL, or a ready :class:`MemoryStorage`.

    ``read_only`` opens it for inspection: files are read and nothing under ``home`` is created; a database is
    not migrated (no schema change). Raises :class:`StorageError` for anything else (saying what is accepted).
    """
    if spec is None:
        return FileStorage(home, read_only=read_only)
    if isinstance(spec, MemoryStorage):
        return spec
    if isinstance(spec, str):
        value = spec.strip()
        if value in ("", "files", "file"):
            return FileStorage(home, read_only=read_only)
        if is_postgres_url(value):
            from .postgres import PostgresStorage

            return PostgresStorage(value, migrate=not read_only)
    shown = spec if not isinstance(spec, str) else re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", spec)
    raise StorageError(
        f"unknown memory storage {shown!r}: use 'files' (the default: MEMORY.md + USER.md + SQLite under the "
        "memory home), a 'postgresql://user:password@host:port/dbname' URL, or a MemoryStorage object"
    )
