"""The built-in provider: MEMORY.md + USER.md, their tools, and the FTS5 index of entries and turns."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
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
from .index import SearchIndex
from .provenance import PendingWrite, ProvenanceStore, open_provenance
from .scope import DEFAULT_SCOPE, USERS_DIR, normalize_scope, scope_folder
from .storage import EntryFile, FileStorage, MemoryStorage, TurnIndex, open_storage
from .store import FileState, MemoryFile, format_usage
from .tools import (
    MEMORY_TOOL,
    SEARCH_TOOL,
    TARGETS,
    Operation,
    OperationError,
    apply_operation,
    check_limit,
    find_entry,
    parse_operations,
    preview,
)

__all__ = ["FILE_NAMES", "BuiltinMemoryProvider", "HeldWrite", "WriteListener", "WriteOutcome"]

log = logging.getLogger("ironmem.builtin")

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
        policy: Policy | None = None,
    ) -> None:
        self.home = Path(home).expanduser()
        self.state_dir = self.home / ".ironmem"
        #: Opened for inspection: entries and turns are read, nothing is created or changed (no folder, lock file,
        #: record or backup, no index write); every write raises :class:`ReadOnlyError`.
        self.read_only = bool(read_only)
        if not self.read_only:
            self.home.mkdir(parents=True, exist_ok=True)
            self.state_dir.mkdir(exist_ok=True)
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

    def scopes_for(self, user_id: str | None, *, memory_per_user: bool = False) -> dict[str, str]:
        """Which scope each target uses for ``user_id``: USER.md is always the user's own; MEMORY.md is shared
        (the default scope) unless ``memory_per_user``. Without a user id both are the default scope."""
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
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(json.dumps({"scope": scope}, ensure_ascii=False), encoding="utf-8")
        except OSError as exc:
            raise MemoryFileError(
                f"cannot create the memory folder of user {scope!r} ({marker.parent}): {exc.strerror or exc}. "
                "Nothing was written; make the memory home writable"
            ) from exc

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
        provenance: WriteCustody = None, call_id: str | None = None,
    ) -> str:
        if name == MEMORY_TOOL.name:
            return self._memory_tool(args, scopes, provenance, call_id)
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
        provenance: WriteCustody = None,
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
            outcome = self._apply_db(self._db, operations, scopes, targets, batch=batch)
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
            try:
                entries, changed, replaced = self._plan(operations, current, batch=batch)
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
                if entries[target] != list(state.entries) or state.hand_edits:
                    self._ensure_scope(scopes[target])
                    new_states[target] = files[target].write_entries(entries[target], like=state)
                else:
                    new_states[target] = state
        for target, state in new_states.items():
            self.index.sync_entries(self.index_key(target, scopes[target]), state.entries)
        self._record_custody(operations, provenances, scopes)
        self._notify(changed)
        hand = {t: s.hand_edits for t, s in current.items() if s.hand_edits}
        return WriteOutcome(new_states, replaced, hand, backups)

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
                    "out. Rephrase it as a plain fact; nothing was written"
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
        batch: bool,
    ) -> WriteOutcome:
        """The database path of :meth:`apply_detailed`: one transaction over every (scope, target) touched,
        the plan (and the limits) computed under the database's row locks, nothing stored when it raises."""
        planned: dict[str, Any] = {}

        def change(current: dict[str, FileState]) -> dict[str, list[str]]:
            # May run again after a lost connection: keep only the last attempt's side results.
            entries, changed, replaced = self._plan(operations, current, batch=batch)
            planned.update(changed=changed, replaced=replaced)
            return entries

        record = [{"action": op.action, "target": op.target, "content": op.content, "old_text": op.old_text,
                   "scope": scopes[op.target]} for op in operations]
        new_states = db.transact_scoped({t: scopes[t] for t in targets}, change, record=record)
        self._notify(planned.get("changed", []))
        return WriteOutcome(new_states, planned.get("replaced", {}))

    def _plan(
        self, operations: list[Operation], current: dict[str, FileState], *, batch: bool
    ) -> tuple[dict[str, list[str]], list[tuple[str, str, str]], dict[int, str]]:
        entries = {t: list(s.entries) for t, s in current.items()}
        changed: list[tuple[str, str, str]] = []  # (action, target, content) for the listeners
        replaced: dict[int, str] = {}
        for position, op in enumerate(operations, 1):
            before = entries[op.target]
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
            entries[op.target], did_change = apply_operation(before, op)
            if not did_change:
                continue
            if op.action == "add":
                changed.append(("add", op.target, op.content))
            else:  # replace and remove name the entry that went away, so mirrors can delete it
                gone = [e for e in before if e not in entries[op.target]]
                changed.extend(("remove", op.target, e) for e in gone)
                if op.action == "replace":
                    replaced[position] = matched
                    changed.append(("add", op.target, op.content))
        for target, state in current.items():
            if batch and state.entries and not entries[target]:
                raise OperationError(
                    f"this batch would remove every entry of {FILE_NAMES[target]}; nothing was written. A batch "
                    "never empties a file (it is how a bad consolidation wipes a profile): remove the last entry "
                    "with a single remove call if that is really meant"
                )
            check_limit(entries[target], list(state.entries), self.limits[target], target)
        return entries, changed, replaced

    def _memory_tool(self, args: dict[str, Any], scopes: dict[str, str] | None, custody: WriteCustody = None,
                     call_id: str | None = None) -> str:
        if not any(self.enabled.values()):
            return _result(success=False, error="Memory is not available: it is disabled in this configuration "
                                                "(memory.memory_enabled and memory.user_profile_enabled are false)")
        try:
            operations = parse_operations(args)
            batch = bool(isinstance(args, dict) and args.get("operations"))
            outcome = self.apply_detailed(operations, scopes=scopes, batch=batch, provenance=custody)
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
        if outcome.hand_edits:
            kept = sum(len(v) for v in outcome.hand_edits.values())
            fields["hand_edits_kept"] = kept
            fields["backup"] = ", ".join(str(b) for b in outcome.backups.values())
            fields["note"] = (f"{kept} block(s) of text added to the file by hand without a § line were kept as "
                              f"entries of their own; the file as it was is saved at {fields['backup']}")
        return _result(**fields)

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
        scopes = {t: normalize_scope((scopes or {}).get(t)) for t in TARGETS}
        if self._db is not None:
            found = self.index.search(query, limit=limit, user_id=user_id, drop_stopwords=False,  # type: ignore[call-arg]
                                      entry_scopes=scopes)
            return _result(success=True, query=query,
                           results=[dataclasses.replace(h, text=_clip_hit(h.text)).to_dict() for h in found])
        keys = {self.index_key(t, scopes[t]): t for t in TARGETS}
        hits = self.index.search(query, limit=limit, kinds=(*keys, "turn"), user_id=user_id, drop_stopwords=False)
        results = [
            dataclasses.replace(h, kind=keys.get(h.kind, h.kind), text=_clip_hit(h.text)).to_dict() for h in hits
        ]
        return _result(success=True, query=query, results=results)

    def shutdown(self) -> None:
        self.custody.close()
        self.storage.close()
