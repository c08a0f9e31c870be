"""The built-in provider: MEMORY.md + USER.md, their tools, and the FTS5 index of entries and turns."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..custody import Origin, Provenance, TurnCustody
from ..errors import IronMemError, MemoryFileError, ReadOnlyError
from ..provider import MemoryProvider, ToolSchema
from ..security import scan
from ..security.policy import Policy, Verdict
from .archive import (
    OVERFLOW_MODES,
    ArchiveFile,
    ArchiveState,
    Record,
    asks_about_past,
    covers,
    make_room,
    near_duplicate,
    usage_warning,
    written_this_session,
)
from .index import SearchHit, SearchIndex
from .private import make_private_dirs, prepare_home, write_private
from .provenance import PendingWrite, ProvenanceStore, open_provenance
from .ranking import query_terms, rank_entries, tokens
from .scope import DEFAULT_SCOPE, USERS_DIR, normalize_scope, scope_folder
from .storage import EntryFile, FileStorage, MemoryStorage, TurnIndex, open_storage
from .store import ENTRY_DELIMITER, FileState, MemoryFile, format_usage
from .tools import (
    MEMORY_TOOL,
    SEARCH_TOOL,
    TARGETS,
    Operation,
    OperationError,
    apply_operation,
    check_limit,
    find_entry,
    memory_tool_schema,
    parse_operations,
    preview,
)

__all__ = ["FILE_NAMES", "BuiltinMemoryProvider", "HeldWrite", "WriteListener", "WriteOutcome"]

log = logging.getLogger("ironmem.builtin")

#: Index keys of a target's archived and superseded texts (``memory~archived``, ``user@ada-...~superseded``).
ARCHIVED_SUFFIX = "~archived"
SUPERSEDED_SUFFIX = "~superseded"

#: Called after a successful write with (action, target, content).
WriteListener = Callable[[str, str, str], None]

FILE_NAMES = {"memory": "MEMORY.md", "user": "USER.md"}
_CONFIG_KEYS = {"memory": "memory.memory_enabled", "user": "memory.user_profile_enabled"}
#: What a refusal next to hand-written text tells the user to do.
DRIFT_REMEDIATION = (
    "Open the .bak copy, put each note you want to keep on its own, separated from the next by a line holding "
    "only §, or add them one at a time with memory(action=add); then retry. Nothing was lost: the file and the "
    "copy are both intact."
)


#: The most characters of one search hit a tool result carries (a hand-pasted megabyte stays on disk).
MAX_HIT_CHARS = 2000


def _clip_hit(text: str) -> str:
    if len(text) <= MAX_HIT_CHARS:
        return text
    return text[:MAX_HIT_CHARS] + f" [... {len(text) - MAX_HIT_CHARS:,} more chars not shown]"


#: The most characters of the query a ``session_search`` result echoes back (a pasted megabyte is not repeated).
MAX_QUERY_ECHO = 200


def _echo_query(query: str) -> str:
    if len(query) <= MAX_QUERY_ECHO:
        return query
    return query[:MAX_QUERY_ECHO] + f" [... {len(query) - MAX_QUERY_ECHO:,} more chars not shown]"


def _result(**fields: Any) -> str:
    return json.dumps(fields, ensure_ascii=False)


#: What a write is told about its custody: an explicit provenance, the turn it was made in, or nothing (the
#: assistant in a clean turn: the scanner alone decides, as before custody).
WriteCustody = Provenance | TurnCustody | None


def _provenance_for(custody: WriteCustody, content: str) -> Provenance:
    if custody is None:
        return Provenance(Origin.ASSISTANT)
    if isinstance(custody, Provenance):
        return custody
    return custody.provenance_of(content)


class HeldWrite(IronMemError):
    """Raised by :meth:`BuiltinMemoryProvider.apply_detailed` when the custody policy holds the write: nothing was
    written; ``provenance`` and ``reason`` say why (the memory tool stages it as a :class:`PendingWrite`)."""

    def __init__(self, provenance: Provenance, reason: str) -> None:
        super().__init__(reason)
        self.provenance = provenance
        self.reason = reason


@dataclass(frozen=True)
class WriteOutcome:
    """What :meth:`BuiltinMemoryProvider.apply_detailed` did."""

    states: dict[str, FileState]
    replaced: dict[int, str] = field(default_factory=dict)  # 1-based operation position -> the entry it overwrote
    hand_edits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    backups: dict[str, Path] = field(default_factory=dict)
    archived: dict[str, list[str]] = field(default_factory=dict)  # target -> texts moved to its archive
    merged: list[tuple[str, str, str]] = field(default_factory=list)  # (target, existing entry, what it became)


@dataclass
class _Plan:
    """What one write will do: the new entries, the listener events, the archive records, what moved."""

    entries: dict[str, list[str]]
    changed: list[tuple[str, str, str]]
    replaced: dict[int, str]
    records: dict[str, list[Record]]
    archived: dict[str, list[str]]
    merged: list[tuple[str, str, str]]


class _ReadOnlyTurns:
    """The turn index of a provider opened read-only: searches and counts pass through, storing a turn raises
    :class:`ReadOnlyError` (a session's ``sync_turn`` logs it and marks the built-in layer degraded)."""

    def __init__(self, index: TurnIndex) -> None:
        self._index = index

    def add_turn(self, *args: Any, **kwargs: Any) -> int:
        raise ReadOnlyError("the memory was opened read-only (for inspection); the turn was not stored")

    def add_turns(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnlyError("the memory was opened read-only (for inspection); the turns were not stored")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


class BuiltinMemoryProvider(MemoryProvider):
    """MEMORY.md (the agent's notes) and USER.md (who the user is) under ``home``, plus search.

    Always present in a :class:`~ironmem.MemoryManager`; it cannot be removed. Files are keyed by
    ``(scope, target)``: scope ``""`` is Hermes's layout (files in ``home``), any other scope is a user id whose
    files live in ``home/users/<folder>/`` (see :mod:`ironmem.core.builtin.scope`).

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
        memory_enabled: bool = True,
        user_profile_enabled: bool = True,
        storage: str | MemoryStorage | None = None,
        read_only: bool = False,
        overflow: str = "archive",
        policy: Policy | None = None,
    ) -> None:
        if overflow not in OVERFLOW_MODES:
            raise ValueError(f"overflow must be 'archive' (a full file moves its least recalled, oldest entries to "
                             f"the archive) or 'refuse' (Hermes: the write is refused), got {overflow!r}")
        #: What a write that does not fit does: ``"archive"`` moves entries out (see
        #: :mod:`ironmem.core.builtin.archive`), ``"refuse"`` refuses it as Hermes does.
        self.overflow = overflow
        self.home = Path(home).expanduser()
        self.state_dir = self.home / ".ironmem"
        #: Opened for inspection: entries and turns are read, nothing is created or changed (no folder, lock file,
        #: record or backup, no index write); every write raises :class:`ReadOnlyError`.
        self.read_only = bool(read_only)
        if not self.read_only:
            prepare_home(self.home, self.state_dir)
        self.limits = {"memory": memory_char_limit, "user": user_char_limit}
        self.enabled = {"memory": bool(memory_enabled), "user": bool(user_profile_enabled)}
        #: Where entries and turns live: files + SQLite (the default) or PostgreSQL (``storage="postgresql://..."``).
        #: With files, the file code of this class runs (scopes, hand edits, drift backups, Hermes locks); with a
        #: database, writes go through :meth:`MemoryStorage.transact` keyed by the same (scope, target) pairs.
        self.storage: MemoryStorage = open_storage(storage, home=self.home, read_only=self.read_only)
        self._db: MemoryStorage | None = None if isinstance(self.storage, FileStorage) else self.storage
        self._files: dict[tuple[str, str], MemoryFile] = {}
        self._files_lock = threading.Lock()
        #: The default scope's files (Hermes's paths), kept as a plain dict for callers and tools.
        self.files: dict[str, Any] = {target: self.file(target) for target in TARGETS}
        self.index: SearchIndex | TurnIndex = (
            _ReadOnlyTurns(self.storage.index) if self.read_only else self.storage.index
        )
        self._listeners: list[WriteListener] = []
        self._warned_over: set[tuple[str, int]] = set()
        self._archives: dict[tuple[str, str], ArchiveFile] = {}
        #: Recalls of live entries counted since the last write of their file: ``(scope, target) -> text -> n``.
        self._recalls: dict[tuple[str, str], dict[str, int]] = {}
        self._recalls_lock = threading.Lock()
        #: The custody policy (origin x action) and where provenance and held writes live (beside the files).
        self.policy: Policy = policy if policy is not None else Policy()
        self.custody: ProvenanceStore = open_provenance(self.storage, home=self.home, read_only=self.read_only)

    # -- scopes -------------------------------------------------------------------------------
    def scope_dir(self, scope: str = DEFAULT_SCOPE) -> Path:
        """The folder holding ``scope``'s files: the home for the default scope, ``home/users/<folder>`` else."""
        scope = normalize_scope(scope)
        return self.home if scope == DEFAULT_SCOPE else self.home / USERS_DIR / scope_folder(scope)

    def file(self, target: str, scope: str = DEFAULT_SCOPE) -> Any:
        """The :class:`MemoryFile` of ``(scope, target)`` (an :class:`EntryFile` reader with a database)."""
        if target not in TARGETS:
            raise ValueError(f"target must be 'memory' or 'user', got {target!r}")
        scope = normalize_scope(scope)
        if self._db is not None:
            entry_file: EntryFile = self._db.entry_file(scope, target, limit=self.limits[target])
            return entry_file
        key = (scope, target)
        with self._files_lock:
            found = self._files.get(key)
            if found is None:
                folder = self.scope_dir(scope)
                found = MemoryFile(folder / FILE_NAMES[target], limit=self.limits[target],
                                   state_dir=folder / ".ironmem", read_only=self.read_only)
                self._files[key] = found
            found.limit = self.limits[target]
            return found

    def scopes_for(self, user_id: str | None, *, memory_per_user: bool = True) -> dict[str, str]:
        """Which scope each target uses for ``user_id``: USER.md is always the user's own; MEMORY.md too unless
        ``memory_per_user=False`` (agent notes shared: the default scope). Without a user id both are the default
        scope."""
        scope = normalize_scope(user_id)
        return {"memory": scope if memory_per_user else DEFAULT_SCOPE, "user": scope}

    def known_scopes(self) -> list[str]:
        """Every user scope that has a folder (read from ``users/*/.ironmem/scope.json``) or database rows."""
        if self._db is not None:
            listed = getattr(self._db, "scopes", None)
            return list(listed()) if callable(listed) else []
        out: list[str] = []
        for marker in sorted((self.home / USERS_DIR).glob("*/.ironmem/scope.json")):
            try:
                out.append(str(json.loads(marker.read_text(encoding="utf-8"))["scope"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    def _ensure_scope(self, scope: str) -> None:
        if scope == DEFAULT_SCOPE:
            return
        marker = self.scope_dir(scope) / ".ironmem" / "scope.json"
        if marker.exists():
            return
        try:
            make_private_dirs(marker.parent)
            write_private(marker, json.dumps({"scope": scope}, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:
            raise MemoryFileError(
                f"cannot create the memory folder of user {scope!r} ({marker.parent}): {exc.strerror or exc}. "
                "Nothing was written; make the memory home writable"
            ) from exc

    # -- archive (issue 37: see archive.py) ----------------------------------------------------
    def archive_file(self, target: str, scope: str = DEFAULT_SCOPE) -> ArchiveFile:
        """The archive log beside ``(scope, target)``'s file (``MEMORY.archive.jsonl``; files backend only)."""
        key = (normalize_scope(scope), target)
        with self._files_lock:
            found = self._archives.get(key)
        if found is None:
            memory_file = self.file(target, key[0])
            found = ArchiveFile(Path(memory_file.path))
            with self._files_lock:
                found = self._archives.setdefault(key, found)
        return found

    def archive_state(self, target: str, scope: str = DEFAULT_SCOPE) -> ArchiveState:
        """The folded archive log of ``(scope, target)``: entry dates and recalls, archived and superseded
        versions."""
        if self._db is not None:
            reader = getattr(self._db, "archive_state", None)
            return reader(normalize_scope(scope), target) if callable(reader) else ArchiveState()
        return self.archive_file(target, scope).state()

    def archive_records(self, target: str, scope: str = DEFAULT_SCOPE) -> list[Record]:
        """Every record of ``(scope, target)``'s archive log, oldest first (``ironmem archive``)."""
        if self._db is not None:
            reader = getattr(self._db, "archive_records", None)
            return list(reader(normalize_scope(scope), target)) if callable(reader) else []
        return self.archive_file(target, scope).all_records()

    def restore(self, target: str, ref: str, *, scope: str = DEFAULT_SCOPE, session_id: str | None = None
                ) -> FileState:
        """Move the archived entry whose record id (or text) is ``ref`` back into its file, as an ``add``
        (merge, limits and the archive rule apply: restoring into a full file moves others out).

        Raises :class:`OperationError` when ``ref`` names no archived entry."""
        scope = normalize_scope(scope)
        state = self.archive_state(target, scope)
        live = self.file(target, scope).read().entries
        found = [r for r in state.archived_now(live) if ref in (r.id, r.text)]
        if not found:
            raise OperationError(f"no archived {target} entry has the id or text {ref!r}; list them with "
                                 "`ironmem archive list`")
        record = found[0]
        outcome = self.apply_detailed([Operation("add", target, record.text)], scopes={target: scope},
                                      session_id=session_id, restoring=record)
        return outcome.states[target]

    def _take_recalls(self, target: str, scope: str, *, peek: bool = False) -> list[Record]:
        """``recalled`` records for the recalls counted since the last write of ``(scope, target)``."""
        with self._recalls_lock:
            counts = self._recalls.get((scope, target), {}) if peek else self._recalls.pop((scope, target), {})
            now = time.time()
            return [Record("recalled", text, now, n=n) for text, n in counts.items()]

    def _pending_recalls(self, target: str, scope: str) -> dict[str, int]:
        with self._recalls_lock:
            return dict(self._recalls.get((scope, target), {}))

    def _count_recalls(self, target: str, scope: str, texts: list[str]) -> None:
        if not texts or self.read_only:
            return
        with self._recalls_lock:
            counts = self._recalls.setdefault((scope, target), {})
            for text in texts:
                counts[text] = counts.get(text, 0) + 1

    def _sync_archive_index(self, target: str, scope: str, live: tuple[str, ...] | list[str]) -> None:
        """Index the archived and superseded texts of ``(scope, target)`` (files backend: SQLite)."""
        if self._db is not None:
            return
        state = self.archive_state(target, scope)
        key = self.index_key(target, scope)
        self.index.sync_entries(f"{key}{ARCHIVED_SUFFIX}", [r.text for r in state.archived_now(live)])
        self.index.sync_entries(f"{key}{SUPERSEDED_SUFFIX}",
                                list(dict.fromkeys(r.text for r in state.superseded_now(live))))

    @staticmethod
    def index_key(target: str, scope: str = DEFAULT_SCOPE) -> str:
        """The key of ``(scope, target)``'s entries in the search index (``memory``, ``user@<folder>``...)."""
        return target if scope == DEFAULT_SCOPE else f"{target}@{scope_folder(scope)}"

    # -- contract -----------------------------------------------------------------------------
    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        scopes = ctx.get("scopes") or {}
        for target in TARGETS:
            self.state(target, scopes.get(target, DEFAULT_SCOPE))

    def tool_schemas(self) -> list[ToolSchema]:
        if not any(self.enabled.values()):
            return [SEARCH_TOOL]
        return [MEMORY_TOOL, SEARCH_TOOL]

    def tool_schemas_for(self, scopes: dict[str, str] | None, user_id: str | None = None) -> list[ToolSchema]:
        """:meth:`tool_schemas` as one session sees them: with a user id, the ``memory`` tool says whether the
        agent's notes (``target="memory"``) are shared between users or private to this one (``scopes``)."""
        schemas = self.tool_schemas()
        if not user_id:
            return schemas
        notes = "private" if normalize_scope((scopes or {}).get("memory")) != DEFAULT_SCOPE else "shared"
        tool = memory_tool_schema(notes)
        return [tool if schema.name == tool.name else schema for schema in schemas]

    def add_write_listener(self, listener: WriteListener) -> None:
        self._listeners.append(listener)

    # -- state --------------------------------------------------------------------------------
    def state(self, target: str, scope: str = DEFAULT_SCOPE) -> FileState:
        """The file's current entries (read from disk) and keep the search index in step with them."""
        memory_file = self.file(target, scope)
        state = memory_file.read()
        if self._db is not None:  # the database indexes entries in the transaction that writes them
            if state.chars > self.limits[target]:
                log.warning("%s of scope %r exceeds its limit: %s chars of %s", FILE_NAMES[target], scope,
                            f"{state.chars:,}", f"{self.limits[target]:,}")
            return state
        if state.corrupt:
            log.error("%s; a copy is at %s", state.corrupt, state.backup)
            return state
        limit = self.limits[target]
        if state.chars > limit and (str(memory_file.path), state.chars) not in self._warned_over:
            self._warned_over.add((str(memory_file.path), state.chars))
            log.warning(
                "%s (%s) exceeds its limit: %s chars of %s. It is kept as it is; the session's snapshot shows a "
                "capped part of it. Remove or shorten entries to get back under the limit",
                FILE_NAMES[target], memory_file.path, f"{state.chars:,}", f"{limit:,}",
            )
        memory_file.note_clean(state)
        self.index.sync_entries(self.index_key(target, normalize_scope(scope)), state.entries)
        return state

    def usage(self, target: str, scope: str = DEFAULT_SCOPE) -> str:
        state = self.file(target, scope).read()
        return format_usage(state.chars, self.limits[target])

    def display_entries(self, entries: tuple[str, ...] | list[str], target: str) -> list[str]:
        """Entries as a tool result may show them: scanned (a failing one becomes a BLOCKED marker), whole while
        they fit the file's limit, else one-line previews, so an error never pays a huge file back."""
        whole = sum(len(e) + 3 for e in entries) <= self.limits[target]
        out = []
        for position, entry in enumerate(entries, 1):
            verdict = scan(entry[:20_000])
            if verdict.blocked:
                out.append(f"[BLOCKED: {verdict.reason}] (entry {position} failed the security scan; remove it with "
                           f"old_text set to {preview(entry, 24)!r} or edit {FILE_NAMES[target]})")
            else:
                out.append(entry if whole else preview(entry))
        return out

    # -- tools --------------------------------------------------------------------------------
    def handle_tool_call(
        self, name: str, args: dict[str, Any], *, user_id: str | None = None, scopes: dict[str, str] | None = None,
        session_id: str | None = None, provenance: WriteCustody = None, call_id: str | None = None,
    ) -> str:
        if name == MEMORY_TOOL.name:
            return self._memory_tool(args, scopes, session_id=session_id, custody=provenance, call_id=call_id)
        if name == SEARCH_TOOL.name:
            return self._search_tool(args, user_id=user_id, scopes=scopes)
        return _result(success=False, error=f"the built-in provider has no tool {name!r}")

    def apply(
        self, operations: list[Operation], *, scopes: dict[str, str] | None = None, batch: bool = False,
        provenance: WriteCustody = None,
    ) -> dict[str, FileState]:
        """Apply ``operations`` all-or-nothing. Raises OperationError / MemoryFileError / :class:`HeldWrite`;
        nothing is written then."""
        return self.apply_detailed(operations, scopes=scopes, batch=batch, provenance=provenance).states

    def apply_detailed(
        self, operations: list[Operation], *, scopes: dict[str, str] | None = None, batch: bool = False,
        session_id: str | None = None, restoring: Record | None = None, provenance: WriteCustody = None,
    ) -> WriteOutcome:
        """:meth:`apply`, returning what was replaced, which hand edits were kept and which copies were saved."""
        if self.read_only:
            raise ReadOnlyError(
                f"the memory in {self.storage.describe()} was opened read-only (for inspection); nothing was "
                "written. Open it for writing (MemoryManager(..., read_only=False)) as a user who may write it"
            )
        scopes = {t: normalize_scope((scopes or {}).get(t)) for t in TARGETS}
        targets = [t for t in TARGETS if any(op.target == t for op in operations)]
        for target in targets:
            if not self.enabled[target]:
                raise OperationError(
                    f"writes to {target!r} ({FILE_NAMES[target]}) are disabled in this configuration "
                    f"({_CONFIG_KEYS[target]}: false); nothing was written"
                )
        for op in operations:
            if op.action in ("add", "replace") and len(op.content) > self.limits[op.target]:
                raise OperationError(  # size first: never scan what cannot be stored
                    f"the entry is {len(op.content):,} characters; {op.target} holds at most "
                    f"{self.limits[op.target]:,} (its limit). Shorten it and retry; nothing was written",
                    show_entries=op.target, limit=True,
                )
        provenances = self._judge(operations, provenance)
        if self._db is not None:
            outcome = self._apply_db(self._db, operations, scopes, targets, batch=batch, session_id=session_id,
                                     restoring=restoring)
            self._record_custody(operations, provenances, scopes)
            return outcome
        files = {t: self.file(t, scopes[t]) for t in targets}
        backups: dict[str, Path] = {}
        with ExitStack() as stack:
            # Lock every file the batch touches, always in the same order, so two batches cannot deadlock.
            current = {t: stack.enter_context(files[t].locked()) for t in targets}
            for target, state in current.items():
                if state.corrupt:
                    raise MemoryFileError(
                        f"{state.corrupt}. A copy is at {state.backup}. Fix or delete {files[target].path} "
                        "and retry; ironmem will not overwrite a file it cannot parse"
                    )
                if state.hand_edits or state.suspect:
                    backup = files[target].save_backup()
                    if backup is not None:
                        backups[target] = backup
            logs = {t: self.archive_state(t, scopes[t]).with_recalls(self._pending_recalls(t, scopes[t]))
                    for t in targets}
            try:
                plan = self._plan(operations, current, batch=batch, logs=logs, session_id=session_id,
                                  restoring=restoring)
            except OperationError as exc:
                if backups:
                    where = ", ".join(str(b) for b in backups.values())
                    exc.args = (f"{exc.args[0]}. The file holds text written outside the memory tool; a copy of it "
                                f"was saved to {where}",)
                    exc.details.setdefault("drift_backup", where)
                    exc.details.setdefault("remediation", DRIFT_REMEDIATION)
                raise
            new_states: dict[str, FileState] = {}
            for target in targets:
                state = current[target]
                entries = plan.entries[target]
                if entries != list(state.entries) or state.hand_edits:
                    self._ensure_scope(scopes[target])
                    # the archive first: a crash before the file is replaced leaves a record of an entry that is
                    # still in the file (read as live), never an entry that is in neither
                    self.archive_file(target, scopes[target]).append(
                        self._take_recalls(target, scopes[target]) + plan.records[target])
                    new_states[target] = files[target].write_entries(entries, like=state)
                else:
                    new_states[target] = state
        for target, state in new_states.items():
            self.index.sync_entries(self.index_key(target, scopes[target]), state.entries)
            if plan.records.get(target):
                self._sync_archive_index(target, scopes[target], state.entries)
        self._record_custody(operations, provenances, scopes)
        self._notify(plan.changed)
        hand = {t: s.hand_edits for t, s in current.items() if s.hand_edits}
        return WriteOutcome(new_states, plan.replaced, hand, backups, plan.archived, plan.merged)

    # -- custody --------------------------------------------------------------------------------
    def _judge(self, operations: list[Operation], custody: WriteCustody) -> list[Provenance]:
        """The custody policy on every operation of a write (the only write gate): refuses with OperationError,
        holds with :class:`HeldWrite` (the whole batch: all or nothing), else returns each operation's provenance."""
        provenances: list[Provenance] = []
        held: tuple[Provenance, str] | None = None
        for op in operations:
            prov = _provenance_for(custody, op.content)
            provenances.append(prov)
            decision = self.policy.decide_write(op.content, prov)
            if decision.verdict is Verdict.REFUSE:
                found = decision.scan
                what = f"{found.reason}): {found.describe()}" if found is not None else f"{decision.reason})"
                raise OperationError(
                    f"Blocked: refused by the security scan ({what}. Memory is shown to the model in every future "
                    "session, so it must not contain instructions, hidden text, secrets or links that send data "
                    "out. Rephrase it as a plain fact; nothing was written",
                    refused_by="security scan",
                )
            if decision.verdict is Verdict.HOLD and held is None:
                held = (prov, decision.reason)
        if held is not None:
            raise HeldWrite(*held)
        return provenances

    def _record_custody(self, operations: list[Operation], provenances: list[Provenance],
                        scopes: dict[str, str]) -> None:
        """Remember where each added or replacing entry came from (beside the files; never in them)."""
        if self.read_only:
            return
        for op, prov in zip(operations, provenances, strict=True):
            if op.action in ("add", "replace") and op.content:
                try:
                    self.custody.record_entries(scopes[op.target], op.target, [op.content], prov)
                except Exception as exc:  # the write landed; a lost record reads as a hand edit later
                    log.error("could not record the provenance of a %s entry: %s", op.target, exc)

    def entry_provenance(self, states: dict[str, FileState], scopes: dict[str, str]) -> dict[str, dict[str, Provenance]]:
        """The recorded provenance of the entries in ``states`` by target (what the snapshot's re-scan judges)."""
        out: dict[str, dict[str, Provenance]] = {}
        for target, state in states.items():
            try:
                out[target] = self.custody.entry_provenance(normalize_scope(scopes.get(target)), target, state.entries)
            except Exception as exc:  # unknown custody: every entry is re-scanned as a hand edit
                log.warning("could not read the provenance of %s entries: %s", target, exc)
        return out

    def stage(self, operations: list[Operation], *, scopes: dict[str, str] | None, batch: bool,
              provenance: Provenance, key: str | None = None) -> PendingWrite:
        """Hold a write for approval (outside MEMORY.md / USER.md). ``key`` makes the id deterministic."""
        scopes = {t: normalize_scope((scopes or {}).get(t)) for t in TARGETS}
        payload = PendingWrite.payload_of(operations, batch=batch)
        used = {op.target for op in operations}
        return self.custody.stage(PendingWrite.new(payload, {t: s for t, s in scopes.items() if t in used},
                                                   provenance, key=key))

    def pending(self, *, status: str = "pending") -> list[PendingWrite]:
        """Held writes (``status``: pending, approved, rejected or all), oldest first."""
        return self.custody.pending(status=status)

    def approve(self, pending_id: str, *, by: str = "user", edited: dict[str, Any] | None = None) -> PendingWrite:
        """Apply a held write as a normal write (judged as the user's own words: only hidden text
        still refuses it). Raises :class:`~ironmem.core.errors.PendingWriteError` for an unknown or
        decided id, OperationError when it cannot apply (it stays pending)."""
        if edited is not None:
            probe = PendingWrite("edit", dict(edited), {}, Provenance(Origin.USER), 0.0)
            probe.operations()  # a malformed edit is refused before the record is touched

        def apply(pending: PendingWrite) -> dict[str, Any]:
            outcome = self.apply_detailed(pending.operations(), scopes=pending.scopes, batch=pending.batch,
                                          provenance=pending.provenance.approved(by))
            return {t: format_usage(s.chars, self.limits[t]) for t, s in outcome.states.items()}

        return self.custody.decide(pending_id, "approved", apply=apply, by=by, edited=edited)

    def reject(self, pending_id: str, *, by: str = "user", note: str = "") -> PendingWrite:
        """Drop a held write, keeping the record of it and of the decision."""
        return self.custody.decide(pending_id, "rejected", by=by, note=note or "rejected")

    def _notify(self, changed: list[tuple[str, str, str]]) -> None:
        for action, target, content in changed:
            for listener in self._listeners:
                try:
                    listener(action, target, content)
                except Exception:  # a listener must never undo or fail a write that landed
                    log.exception("memory write listener failed")

    def _apply_db(
        self, db: MemoryStorage, operations: list[Operation], scopes: dict[str, str], targets: list[str], *,
        batch: bool, session_id: str | None = None, restoring: Record | None = None,
    ) -> WriteOutcome:
        """The database path of :meth:`apply_detailed`: one transaction over every (scope, target) touched,
        the plan (and the limits) computed under the database's row locks, nothing stored when it raises."""
        planned: dict[str, _Plan] = {}

        def change(current: dict[str, FileState]) -> dict[str, list[str]]:
            # May run again after a lost connection: keep only the last attempt's side results. The archive is
            # read here, under the rows' locks (its rows are written only while they are held).
            logs = {t: db.archive_state(scopes[t], t).with_recalls(self._pending_recalls(t, scopes[t]))
                    for t in current}
            planned["plan"] = plan = self._plan(operations, current, batch=batch, logs=logs, session_id=session_id,
                                                restoring=restoring)
            return plan.entries

        def archive() -> dict[str, list[Record]]:
            plan = planned["plan"]
            return {t: self._take_recalls(t, scopes[t], peek=True) + plan.records[t]
                    for t in plan.records if plan.records[t]}

        record = [{"action": op.action, "target": op.target, "content": op.content, "old_text": op.old_text,
                   "scope": scopes[op.target]} for op in operations]
        new_states = db.transact_scoped({t: scopes[t] for t in targets}, change, record=record, archive=archive)
        plan = planned["plan"]
        for target in targets:
            if plan.records.get(target):
                self._take_recalls(target, scopes[target])
        self._notify(plan.changed)
        return WriteOutcome(new_states, plan.replaced, archived=plan.archived, merged=plan.merged)

    def _plan(
        self, operations: list[Operation], current: dict[str, FileState], *, batch: bool,
        logs: dict[str, ArchiveState] | None = None, session_id: str | None = None,
        restoring: Record | None = None,
    ) -> _Plan:
        """Apply ``operations`` to ``current`` (read under the lock): the new entries, and under
        ``overflow="archive"`` the merges, superseded versions and archive moves (``logs``: each target's folded
        archive log). Raises :class:`OperationError` when the write cannot be applied; nothing is written then."""
        logs = logs or {}
        entries = {t: list(s.entries) for t, s in current.items()}
        changed: list[tuple[str, str, str]] = []  # (action, target, content) for the listeners
        replaced: dict[int, str] = {}
        touched: dict[str, set[str]] = {t: set() for t in current}  # texts this write puts in (never archived by it)
        merged: list[tuple[str, str, str]] = []
        superseded: dict[str, list[tuple[str, str, str]]] = {t: [] for t in current}  # (old, new, how)
        for position, op in enumerate(operations, 1):
            before = entries[op.target]
            if op.action == "replace" and self._archived_match(before, op, logs.get(op.target)) is not None:
                # the entry it names left the full file: the archived version is superseded, the new one added
                old = self._archived_match(before, op, logs.get(op.target)) or ""
                entries[op.target] = [*before, op.content] if op.content not in before else before
                superseded[op.target].append((old, op.content, "replace"))
                touched[op.target].add(op.content)
                replaced[position] = old
                changed.append(("add", op.target, op.content))
                continue
            if op.action in ("replace", "remove"):
                matched = before[find_entry(before, op.old_text, op.target)]
                if matched in current[op.target].suspect:
                    raise OperationError(
                        f"Refusing to {op.action} in {FILE_NAMES[op.target]}: the entry {preview(matched, 40)!r} is "
                        f"{len(matched):,} chars, longer than the whole file's {self.limits[op.target]:,}-char "
                        "limit, so text was most likely added to it by hand, by a shell or by another tool without "
                        "§ separators; changing it could lose that text",
                        remediation=DRIFT_REMEDIATION,
                    )
            elif op.content not in before:  # merge first: an add that nearly duplicates an entry updates it
                twin = next((e for e in before if e not in current[op.target].suspect
                             and near_duplicate(e, op.content)), None)
                log_state = logs.get(op.target)
                shelved = None if twin is not None or log_state is None else next(
                    (r.text for r in reversed(log_state.archived_now(before)) if near_duplicate(r.text, op.content)),
                    None)
                if shelved is not None:  # it duplicates an archived entry: that one is updated and comes back
                    if covers(shelved, op.content):
                        restoring = restoring or log_state.archived.get(shelved) if log_state else restoring
                        text = shelved
                    else:
                        superseded[op.target].append((shelved, op.content, "merge"))
                        text = op.content
                    entries[op.target] = [*before, text]
                    touched[op.target].add(text)
                    changed.append(("add", op.target, text))
                    merged.append((op.target, shelved, text))
                    continue
                if twin is not None:
                    if not covers(twin, op.content):
                        entries[op.target] = [op.content if e == twin else e for e in before]
                        superseded[op.target].append((twin, op.content, "merge"))
                        changed.extend((("remove", op.target, twin), ("add", op.target, op.content)))
                        touched[op.target].add(op.content)
                        merged.append((op.target, twin, op.content))
                    else:  # the existing entry already says all of it (and more)
                        touched[op.target].add(twin)
                        merged.append((op.target, twin, twin))
                    continue
            entries[op.target], did_change = apply_operation(before, op)
            if not did_change:
                if op.action == "add":
                    touched[op.target].add(op.content)
                continue
            if op.action == "add":
                changed.append(("add", op.target, op.content))
                touched[op.target].add(op.content)
            else:  # replace and remove name the entry that went away, so mirrors can delete it
                gone = [e for e in before if e not in entries[op.target]]
                changed.extend(("remove", op.target, e) for e in gone)
                if op.action == "replace":
                    replaced[position] = matched
                    changed.append(("add", op.target, op.content))
                    touched[op.target].add(op.content)
                    superseded[op.target].append((matched, op.content, "replace"))
        records: dict[str, list[Record]] = {t: [] for t in current}
        archived: dict[str, list[str]] = {}
        now = time.time()
        for target, state in current.items():
            if batch and state.entries and not entries[target]:
                raise OperationError(
                    f"this batch would remove every entry of {FILE_NAMES[target]}; nothing was written. A batch "
                    "never empties a file (it is how a bad consolidation wipes a profile): remove the last entry "
                    "with a single remove call if that is really meant"
                )
            log_state = logs.get(target) or ArchiveState()
            for old, new, how in superseded[target]:
                if new == old:
                    continue
                info = log_state.info.get(old)
                records[target].append(Record(
                    "superseded", old, now, since=info.written if info else None, by=new, how=how,
                    session=session_id, provenance=info.provenance if info else None))
            for text in sorted(touched[target]):
                if text in entries[target] and text not in state.entries:
                    if restoring is not None and text == restoring.text:
                        records[target].append(Record("restored", text, now, since=restoring.since, ref=restoring.id,
                                                      session=session_id, provenance=restoring.provenance))
                    else:
                        records[target].append(Record("written", text, now, session=session_id))
            limit = self.limits[target]
            new_chars = len(ENTRY_DELIMITER.join(entries[target]))
            if self.overflow == "archive" and new_chars > limit and new_chars > state.chars:
                protected = touched[target] | written_this_session(entries[target], log_state, session_id, None)
                protected |= set(state.suspect)
                room = make_room(entries[target], state.entries, limit, log_state, protected=protected,
                                 name=FILE_NAMES[target], session=session_id, now=now)
                if room is None:
                    raise OperationError(
                        f"{target} would be {new_chars:,} chars, over its {limit:,}-char limit, and moving entries to "
                        "the archive cannot make room: the entries written in this session (and this write's own) "
                        "stay in the file. Nothing was written. Consolidate now: 'replace' overlapping entries with "
                        "a shorter one or 'remove' stale ones (see current_entries), then retry -- one batch "
                        "(operations) can do both",
                        show_entries=target, limit=True,
                    )
                entries[target], moved = room
                records[target].extend(moved)
                archived[target] = [r.text for r in moved]
            check_limit(entries[target], list(state.entries), limit, target)
        return _Plan(entries, changed, replaced, records, archived, merged)

    def _memory_tool(self, args: dict[str, Any], scopes: dict[str, str] | None, *, session_id: str | None = None,
                     custody: WriteCustody = None, call_id: str | None = None) -> str:
        if not any(self.enabled.values()):
            return _result(success=False, error="Memory is not available: it is disabled in this configuration "
                                                "(memory.memory_enabled and memory.user_profile_enabled are false)")
        try:
            operations = parse_operations(args)
            batch = bool(isinstance(args, dict) and args.get("operations"))
            outcome = self.apply_detailed(operations, scopes=scopes, batch=batch, session_id=session_id,
                                          provenance=custody)
        except HeldWrite as held:
            session = held.provenance.session
            key = f"{session}:{call_id}" if call_id else None
            try:
                pending = self.stage(operations, scopes=scopes, batch=batch, provenance=held.provenance, key=key)
            except Exception as exc:
                log.error("could not hold a memory write for approval: %s", exc)
                return _result(success=False, error=f"the write needs the user's approval but could not be held "
                                                    f"({exc}); nothing was written")
            return _result(
                success=True, done=True, staged=True, saved=False, pending_id=pending.id,
                message=(f"Held for the user's approval, NOT saved: {held.reason}. It will not appear in future "
                         "sessions unless the user approves it (ironmem review). Do not retry; tell the user what "
                         "you wanted to save."),
            )
        except OperationError as exc:
            if isinstance(args, dict) and args.get("operations") and not exc.limit:
                exc.show_entries = None  # a failed batch does not pay the store back (only a limit error does)
            return self._error(exc, scopes)
        except MemoryFileError as exc:
            return _result(success=False, error=str(exc))
        states = outcome.states
        usage = {t: format_usage(s.chars, self.limits[t]) for t, s in states.items()}
        fields: dict[str, Any]
        if not batch and len(operations) == 1:
            op = operations[0]
            fields = {"success": True, "done": True, "action": op.action, "target": op.target,
                      "usage": usage[op.target], "entries": len(states[op.target].entries)}
            if 1 in outcome.replaced:
                fields["replaced_entry"] = self.display_entries([outcome.replaced[1]], op.target)[0]
        else:
            fields = {"success": True, "done": True, "applied": len(operations)}
            if len(states) == 1:
                (target, state), = states.items()
                fields.update(target=target, usage=usage[target], entries=len(state.entries))
            else:
                fields["usage"] = usage
            if outcome.replaced:
                fields["replaced_entries"] = {
                    str(k): self.display_entries([v], operations[k - 1].target)[0] for k, v in outcome.replaced.items()
                }
        self._capacity_fields(fields, outcome)
        if outcome.hand_edits:
            kept = sum(len(v) for v in outcome.hand_edits.values())
            fields["hand_edits_kept"] = kept
            fields["backup"] = ", ".join(str(b) for b in outcome.backups.values())
            fields["note"] = (f"{kept} block(s) of text added to the file by hand without a § line were kept as "
                              f"entries of their own; the file as it was is saved at {fields['backup']}")
        return _result(**fields)

    def _archived_match(self, live: list[str], op: Operation, log_state: ArchiveState | None) -> str | None:
        """The archived entry a ``replace`` names when no entry in the file holds ``old_text`` (an entry equal to
        it, else the unique one holding it); None otherwise (the usual no-match error follows)."""
        if log_state is None or not log_state.archived or any(op.old_text in e for e in live):
            return None
        archived = [r.text for r in log_state.archived_now(live)]
        if op.old_text in archived:
            return op.old_text
        holding = [t for t in archived if op.old_text in t]
        return holding[0] if len(holding) == 1 else None

    def _capacity_fields(self, fields: dict[str, Any], outcome: WriteOutcome) -> None:
        """Say in a tool result what the archive tier, merge-first and supersession did, and warn near a limit."""
        if outcome.merged:
            fields["merged"] = [
                {"target": t, "entry": preview(old, 120), "now": preview(new, 120) if new != old else "unchanged "
                 "(it already says this)"} for t, old, new in outcome.merged]
            fields["note"] = ("an entry already said nearly the same, so it was updated instead of adding a second "
                              "one (its earlier text is kept as a superseded version)")
        if outcome.replaced:
            fields["kept_as_superseded"] = True  # the replaced text stays findable as a dated, superseded version
        moved = [(t, text) for t, texts in outcome.archived.items() for text in texts]
        if moved:
            fields["archived"] = [{"target": t, "entry": preview(text, 120)} for t, text in moved]
            fields["archive_note"] = (
                f"{len(moved)} entr{'y' if len(moved) == 1 else 'ies'} moved from the full file to its archive (the "
                "least recalled, oldest first); nothing was lost: session_search still finds them, and "
                "`ironmem archive restore` puts one back")
        warnings = [w for t, st in outcome.states.items()
                    if (w := usage_warning(st.chars, self.limits[t], FILE_NAMES[t], self.overflow))]
        if warnings:
            fields["warning"] = " ".join(warnings)

    def _error(self, exc: OperationError, scopes: dict[str, str] | None) -> str:
        fields: dict[str, Any] = {"success": False, "error": str(exc), **exc.details}
        target = exc.show_entries
        if target is not None:
            scope = normalize_scope((scopes or {}).get(target))
            state = self.file(target, scope).read()
            if not state.corrupt:
                fields["current_entries"] = self.display_entries(state.entries, target)
                fields["usage"] = format_usage(state.chars, self.limits[target])
        return _result(**fields)

    def _search_tool(self, args: dict[str, Any], *, user_id: str | None, scopes: dict[str, str] | None = None) -> str:
        query = args.get("query") if isinstance(args, dict) else None
        if not isinstance(query, str) or not query.strip():
            return _result(success=False, error="session_search needs a non-empty 'query' string")
        limit = args.get("limit", 5)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 20:
            return _result(success=False, error="'limit' must be an integer from 1 to 20")
        results = self.search(query, scopes=scopes, user_id=user_id, limit=limit)
        return _result(success=True, query=_echo_query(query), results=results)

    def search(
        self, query: str, *, scopes: dict[str, str] | None = None, user_id: str | None = None, limit: int = 5,
        turns: bool = True, live: bool = True,
    ) -> list[dict[str, Any]]:
        """What ``session_search`` returns: entries of this session's files, their archived entries, past turns
        of ``user_id``, best first, as JSON-able dicts (``kind``, ``text``, ``score``, dates, ``status``).

        Recall prefers current facts: a superseded version (a replaced or merged entry) is included, marked
        ``"status": "superseded"`` with its validity interval, only when the query asks about the past
        (:func:`~ironmem.core.builtin.archive.asks_about_past`). Archived entries are current facts that left a
        full file: ``"status": "archived"``. ``turns=False`` / ``live=False`` leave out turns / the live entries.
        """
        scopes = {t: normalize_scope((scopes or {}).get(t)) for t in TARGETS}
        past = asks_about_past(query)
        logs = {t: self.archive_state(t, scopes[t]) for t in TARGETS}
        if self._db is not None:
            found = self.index.search(query, limit=limit, user_id=user_id, drop_stopwords=False,  # type: ignore[call-arg]
                                      entry_scopes=scopes if live else {},
                                      kinds=(*(TARGETS if live else ()), *(("turn",) if turns else ())))
            hits = [(h, h.kind, "") for h in found]
            extra = self._rank_archive(query, scopes, logs, past=past)
            merged = sorted(hits + extra, key=lambda x: -x[0].score)[:limit]
        else:
            keys: dict[str, tuple[str, str]] = {}
            for t in TARGETS:
                key = self.index_key(t, scopes[t])
                if live:
                    keys[key] = (t, "")
                keys[f"{key}{ARCHIVED_SUFFIX}"] = (t, "archived")
                if past:
                    keys[f"{key}{SUPERSEDED_SUFFIX}"] = (t, "superseded")
                if not self.read_only:
                    self._sync_archive_index(t, scopes[t], self.file(t, scopes[t]).read().entries)
            found = self.index.search(query, limit=limit, kinds=(*keys, *(("turn",) if turns else ())),
                                      user_id=user_id, drop_stopwords=False)
            merged = [(h, *keys.get(h.kind, (h.kind, ""))) for h in found]
        out: list[dict[str, Any]] = []
        recalled: dict[str, list[str]] = {}
        for hit, kind, status in merged:
            item = dataclasses.replace(hit, kind=kind, text=_clip_hit(hit.text)).to_dict()
            if kind in TARGETS:
                item.update(self._entry_dates(hit.text, logs[kind], status))
                if not status:
                    recalled.setdefault(kind, []).append(hit.text)
            if status:
                item["status"] = status
            out.append(item)
        for target, texts in recalled.items():
            self._count_recalls(target, scopes[target], texts)
        return out

    def recall_archived(self, query: str, *, scopes: dict[str, str] | None = None, limit: int = 3
                        ) -> list[tuple[str, str | None]]:
        """Archived entries (and, for a question about the past, superseded ones, marked) relevant to ``query``,
        for a session's prefetch: ``[(labelled text, date or None)]``, best first. Never raises."""
        try:
            found = self.search(query, scopes=scopes, limit=limit, turns=False, live=False)
        except Exception as exc:  # recall must never fail a turn
            log.warning("recall of archived entries failed: %s", exc)
            return []
        strong = [t for t in query_terms(query) if not t.weak]
        out: list[tuple[str, str | None]] = []
        for hit in found:
            words = tokens(hit["text"])
            counts = Counter(words)
            if not any(term.count(words, counts) for term in strong):
                continue  # recalled unasked only when it shares a content word with the message
            label = "memory" if hit["kind"] == "memory" else "user profile"
            if hit.get("status") == "superseded":
                text = (f"[{label}, superseded - true {hit.get('valid_from', '?')} to {hit.get('valid_until', '?')}, "
                        f"no longer current] {hit['text']}")
                out.append((text, None))
            else:
                out.append((f"[{label}, archived] {hit['text']}", hit.get("date")))
        return out

    @staticmethod
    def _entry_dates(text: str, log_state: ArchiveState, status: str) -> dict[str, Any]:
        """The dates a recalled entry carries: when it was written; for an archived one when it moved; for a
        superseded one its validity interval and what replaced it."""
        def day(ts: float | None) -> str | None:
            return time.strftime("%Y-%m-%d", time.gmtime(ts)) if ts is not None else None

        out: dict[str, Any] = {}
        if status == "superseded":
            versions = [r for r in log_state.superseded if r.text == text]
            if versions:
                last = versions[-1]
                out.update(valid_from=day(last.since), valid_until=day(last.at), replaced_by=preview(last.by or "", 120))
        elif status == "archived":
            record = log_state.archived.get(text)
            if record is not None:
                out.update(date=day(record.since), archived_on=day(record.at))
        else:
            out["date"] = day(log_state.written_at(text))
        return {k: v for k, v in out.items() if v is not None}

    def _rank_archive(
        self, query: str, scopes: dict[str, str], logs: dict[str, ArchiveState], *, past: bool
    ) -> list[tuple[SearchHit, str, str]]:
        """Archived (and, for a question about the past, superseded) texts ranked for ``query`` (the database
        backend; the file backend indexes them in SQLite)."""
        rows: list[tuple[str, str]] = []
        for t in TARGETS:
            live = self.file(t, scopes[t]).read().entries
            rows.extend((f"{t}{ARCHIVED_SUFFIX}", r.text) for r in logs[t].archived_now(live))
            if past:
                rows.extend((f"{t}{SUPERSEDED_SUFFIX}", text)
                            for text in dict.fromkeys(r.text for r in logs[t].superseded_now(live)))
        out = []
        for key, text, score in rank_entries(query_terms(query), rows):
            target, _, status = key.partition("~")
            out.append((SearchHit(target, text, round(score, 4)), target, status))
        return out

    def shutdown(self) -> None:
        self.custody.close()
        self.storage.close()
