"""Provenance of entries and turns, and the pending (held) writes, kept BESIDE the Hermes files.

Nothing here is ever written into MEMORY.md or USER.md: Hermes reading the same folder sees exactly the entries it
would have seen, and never a held write. Two backends, chosen by the memory's storage:

- files + SQLite: ``<home>/.ironmem/custody.db`` (a sidecar of its own: the search index can be rebuilt without
  losing custody, and custody can be inspected with any SQLite tool);
- PostgreSQL: three tables in the storage's schema (``custody_entries``, ``custody_turns``, ``custody_pending``).

What is stored:

- an entry's provenance, keyed by (scope, target, SHA-256 of the exact text). An entry without a record was put
  in the file by something other than the memory tool (a hand edit, Hermes itself): :class:`Provenance` reads it as
  ``hand_edit``;
- a turn's provenance, keyed by its id in the turn index, only for turns that untrusted input entered (a turn
  without a record is clean: the user's words and the assistant's reply);
- pending writes: the write exactly as the tool received it (Hermes's staged-payload shape: ``action``, ``target``,
  ``content``, ``old_text`` or ``operations``), its scopes and provenance, and its decision once made.

Deciding a pending write is atomic across processes: the decision takes the record's lock (SQLite ``BEGIN
IMMEDIATE``, PostgreSQL ``SELECT ... FOR UPDATE``), checks it is still pending, applies it and records the decision
in the same transaction. The second of two processes approving the same write waits, then gets a clear "already
approved" answer; a write that cannot apply (over the limit, its ``old_text`` gone) stays pending with the reason.

Example:
    >>> import tempfile
    >>> from ironmem.core.custody import Origin, Provenance
    >>> store = SQLiteProvenance(tempfile.mkdtemp() + "/custody.db")
    >>> held = store.stage(PendingWrite.new({"action": "add", "target": "memory", "content": "x"}, {"memory": ""},
    ...                                     Provenance(Origin.TOOL, "web_fetch")))
    >>> [p.id for p in store.pending()] == [held.id]
    True
    >>> store.decide(held.id, "rejected", by="ada").status
    'rejected'
    >>> store.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..custody import Origin, Provenance, text_key
from ..errors import InvalidArgumentError, PendingWriteError
from .index import enable_wal
from .private import create_private_file, make_private_dirs, write_private
from .tools import Operation, parse_operations

if TYPE_CHECKING:
    from .postgres import PostgresStorage
    from .storage import MemoryStorage

__all__ = [
    "PendingWrite",
    "hermes_pending_dir",
    "PostgresProvenance",
    "ProvenanceStore",
    "SQLiteProvenance",
    "open_provenance",
]

log = logging.getLogger(__name__)

#: A pending write's status; ``resolved``: it was Hermes's too, and Hermes decided it (see SQLiteProvenance).
Status = Literal["pending", "approved", "rejected", "resolved"]
STATUSES: tuple[str, ...] = ("pending", "approved", "rejected", "resolved")


def _summary(payload: dict[str, Any]) -> str:
    """Hermes's one-line summary of a staged memory write ("add to memory", "apply 2 op(s) to user profile")."""
    label = "user profile" if payload.get("target") == "user" else "memory"
    if payload.get("action") == "batch":
        return f"apply {len(payload.get('operations') or [])} op(s) to {label}"
    verb = {"add": "add to", "replace": "replace in", "remove": "remove from"}.get(str(payload.get("action")), "change")
    return f"{verb} {label}"


@dataclass(frozen=True)
class PendingWrite:
    """A held memory write: the tool's arguments, whose files it targets, where it came from, and its decision.

    ``payload`` has Hermes's staged shape, so a record means the same to both: ``{"action": "add", "target":
    "memory", "content": ...}``, or ``{"action": "batch", "target": ..., "operations": [...]}``.

    Example:
        >>> p = PendingWrite.new({"action": "add", "target": "user", "content": "Likes tea"}, {"user": ""},
        ...                      Provenance(Origin.TOOL, "web_fetch"))
        >>> p.to_hermes()["summary"], p.texts
        ('add to user profile', ['Likes tea'])
    """

    id: str
    payload: dict[str, Any]
    scopes: dict[str, str]
    provenance: Provenance
    created: float
    status: str = "pending"
    decided_at: float | None = None
    decided_by: str = ""
    note: str = ""
    #: The record is also a file of Hermes's pending folder (``pending/memory/<id>.json``): Hermes lists it and may
    #: decide it there (see :class:`SQLiteProvenance`).
    hermes: bool = False

    @classmethod
    def new(cls, payload: dict[str, Any], scopes: dict[str, str], provenance: Provenance, *,
            key: str | None = None) -> PendingWrite:
        """A fresh pending write. ``key`` (a session and tool-call id) makes its id deterministic, so a tool call a
        framework runs again (a LangGraph node resumed after an interrupt) finds the write it already held."""
        pid = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12] if key else uuid.uuid4().hex[:12]
        return cls(pid, dict(payload), dict(scopes), provenance, time.time())

    @staticmethod
    def payload_of(operations: list[Operation], *, batch: bool) -> dict[str, Any]:
        """The Hermes-shaped payload of parsed operations."""
        if not batch and len(operations) == 1:
            op = operations[0]
            out: dict[str, Any] = {"action": op.action, "target": op.target}
            if op.content:
                out["content"] = op.content
            if op.old_text:
                out["old_text"] = op.old_text
            return out
        return {"action": "batch", "target": operations[0].target if operations else "memory",
                "operations": [{k: v for k, v in (("action", op.action), ("target", op.target),
                                                  ("content", op.content), ("old_text", op.old_text)) if v}
                               for op in operations]}

    def operations(self) -> list[Operation]:
        """The write as operations (raises :class:`~ironmem.core.errors.OperationError` if it no longer parses)."""
        if self.payload.get("action") == "batch":
            return parse_operations({"target": self.payload.get("target"), "operations": self.payload.get("operations")})
        return parse_operations(self.payload)

    @property
    def batch(self) -> bool:
        return self.payload.get("action") == "batch"

    @property
    def texts(self) -> list[str]:
        """The texts this write would add (what recall may show, labelled)."""
        ops = self.payload.get("operations") if self.batch else [self.payload]
        return [str(op.get("content")) for op in ops or [] if isinstance(op, dict) and op.get("content")]

    @property
    def summary(self) -> str:
        return _summary(self.payload)

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "payload": self.payload, "scopes": self.scopes, "provenance": self.provenance.to_dict(),
               "created": self.created, "status": self.status, "decided_at": self.decided_at,
               "decided_by": self.decided_by, "note": self.note}
        if self.hermes:
            out["hermes"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingWrite:
        return cls(str(data["id"]), dict(data.get("payload") or {}), dict(data.get("scopes") or {}),
                   Provenance.from_dict(data.get("provenance")), float(data.get("created") or 0.0),
                   str(data.get("status") or "pending"), data.get("decided_at"), str(data.get("decided_by") or ""),
                   str(data.get("note") or ""), bool(data.get("hermes")))

    def to_hermes(self) -> dict[str, Any]:
        """The record as Hermes's ``pending/memory/<id>.json`` holds it (origin in Hermes's names)."""
        origin = "foreground" if self.provenance.origin in (Origin.USER, Origin.ASSISTANT) else self.provenance.label
        return {"id": self.id, "subsystem": "memory", "action": self.payload.get("action", ""),
                "summary": self.summary, "origin": origin, "created_at": self.created, "payload": self.payload}


def _check_status(status: str) -> None:
    if status not in ("approved", "rejected"):
        raise InvalidArgumentError(f"a pending write is decided as 'approved' or 'rejected', got {status!r}")


def _already(found: PendingWrite) -> PendingWrite:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(found.decided_at or 0))
    raise PendingWriteError(
        f"pending write {found.id} was already {found.status} ({when}{', by ' + found.decided_by if found.decided_by else ''}); "
        "nothing was changed. List the open ones with `ironmem review`"
    )


def _unknown(pending_id: str) -> PendingWriteError:
    return PendingWriteError(
        f"no pending write with id {pending_id!r}; nothing was changed. List the open ones with `ironmem review`"
    )


#: Applies a pending write when it is approved; raises to leave it pending (the reason goes to the caller).
Apply = Callable[[PendingWrite], Any]


class ProvenanceStore(ABC):
    """Where provenance and pending writes live (see the module docstring). Thread-safe."""

    # -- entries --------------------------------------------------------------------------------
    @abstractmethod
    def record_entries(self, scope: str, target: str, texts: Iterable[str], provenance: Provenance) -> None:
        """Remember that ``texts`` (entries just written to (scope, target)) have ``provenance``."""

    @abstractmethod
    def _entry_rows(self, scope: str, target: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Stored provenance dicts by text key."""

    def entry_provenance(self, scope: str, target: str, texts: Iterable[str]) -> dict[str, Provenance]:
        """The provenance of each text (a text nobody recorded is a hand edit)."""
        texts = list(texts)
        rows = self._entry_rows(scope, target, [text_key(t) for t in texts]) if texts else {}
        return {t: Provenance.from_dict(rows.get(text_key(t))) for t in texts}

    # -- turns ----------------------------------------------------------------------------------
    @abstractmethod
    def record_turn(self, turn_id: int, provenance: Provenance) -> None:
        """Remember the provenance of a turn whose reply was made after untrusted input."""

    @abstractmethod
    def turn_provenance(self, turn_ids: Iterable[int]) -> dict[int, Provenance]:
        """The recorded provenance of the turns that have one (turns without one are clean)."""

    def index_turn(self, index: Any, session_id: str, user: str, assistant: str, *, user_id: str | None,
                   ts: float | None, provenance: Provenance | None) -> int:
        """Store one exchange in ``index`` (``add_turn``) with its provenance (None: a clean turn, no record);
        returns its turn id. A backend that can write both in one statement does (PostgreSQL)."""
        turn_id = int(index.add_turn(session_id, user, assistant, user_id=user_id, ts=ts))
        if provenance is not None:
            self.record_turn(turn_id, provenance)
        return turn_id

    def recall_custody(self, turn_ids: Iterable[int], *, held: int = 200) -> tuple[dict[int, Provenance],
                                                                                  list[PendingWrite]]:
        """What a prefetch needs, in one call: the provenance of recalled turns and up to ``held`` pending
        writes (a backend over the network answers both in one round trip)."""
        return self.turn_provenance(turn_ids), (self.pending(limit=held) if held else [])

    # -- pending writes -------------------------------------------------------------------------
    @abstractmethod
    def stage(self, pending: PendingWrite) -> PendingWrite:
        """Store a pending write; when one with the same id exists, return that one unchanged."""

    @abstractmethod
    def get(self, pending_id: str) -> PendingWrite | None:
        """The pending write ``pending_id`` (any status), or None."""

    @abstractmethod
    def pending(self, *, status: str = "pending", limit: int = 1000) -> list[PendingWrite]:
        """Writes with ``status`` (``"pending"``, ``"approved"``, ``"rejected"`` or ``"all"``), oldest first."""

    @abstractmethod
    def decide(self, pending_id: str, status: str, *, apply: Apply | None = None, by: str = "",
               note: str = "", edited: dict[str, Any] | None = None) -> PendingWrite:
        """Approve (``apply`` runs inside the record's lock) or reject a pending write, atomically.

        Raises :class:`PendingWriteError` for an unknown or already decided id; an exception from ``apply`` leaves
        the write pending and propagates. ``edited`` replaces the payload before it is applied (an approve-with-edit).
        """

    def _decided(self, found: PendingWrite, status: str, by: str, note: str, apply: Apply | None,
                 edited: dict[str, Any] | None) -> PendingWrite:
        """The common part of :meth:`decide`, run under the record's lock."""
        if found.status != "pending":
            _already(found)
        if edited is not None:
            found = replace(found, payload=dict(edited))
        result = apply(found) if (status == "approved" and apply is not None) else None
        if result is not None and not note:
            note = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        return replace(found, status=status, decided_at=time.time(), decided_by=by or "user", note=note)

    # -- audit ----------------------------------------------------------------------------------
    @abstractmethod
    def entry_records(self) -> list[tuple[str, str, str, Provenance]]:
        """Every recorded entry provenance: (scope, target, text key, provenance)."""

    @abstractmethod
    def turn_records(self) -> list[tuple[int, Provenance]]:
        """Every recorded turn provenance."""

    @abstractmethod
    def close(self) -> None: ...


# ------------------------------------------------------------------------------------------------ Hermes
#: Hermes's names for its write origins; what they mean in ironmem (both are the agent writing).
_HERMES_ORIGINS = ("foreground", "background_review")
_WARNED: set[str] = set()  # Hermes records already reported as changed (once per process)


def hermes_pending_dir(home: Path) -> Path | None:
    """Hermes's pending folder for memory writes when ``home`` is a Hermes memory folder, else None.

    Hermes keeps MEMORY.md and USER.md in ``$HERMES_HOME/memories`` and, with ``memory.write_approval`` on, stages
    each held write as ``$HERMES_HOME/pending/memory/<id>.json`` (tools/write_approval.py)."""
    home = Path(home)
    return home.parent / "pending" / "memory" if home.name == "memories" else None


def _payload_sha256(payload: dict[str, Any]) -> str:
    """The digest Hermes's newer pending records carry (sorted keys, compact separators, UTF-8)."""
    data = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def _from_hermes(record: Any, name: str) -> PendingWrite | None:
    """A Hermes pending record as a pending write, or None when it is not one Hermes itself would apply (not a
    memory record, its id is not its file name, its payload changed after it was staged, or it is being applied)."""
    if not isinstance(record, dict) or record.get("subsystem") != "memory" or record.get("id") != name:
        return None
    payload = record.get("payload")
    if not isinstance(payload, dict) or record.get("state", "pending") != "pending":
        return None
    digest = record.get("payload_sha256")
    if digest is not None and digest != _payload_sha256(payload):
        if name not in _WARNED:
            _WARNED.add(name)
            log.warning("Hermes pending record %s was changed after it was staged; it is not offered for approval",
                        name)
        return None
    found = record.get("ironmem")
    extra: dict[str, Any] = found if isinstance(found, dict) else {}
    if extra.get("provenance"):
        provenance = Provenance.from_dict(extra["provenance"])
    else:
        origin = str(record.get("origin") or "foreground")
        provenance = Provenance(Origin.ASSISTANT, f"hermes {origin}" if origin in _HERMES_ORIGINS else origin)
    targets = {str(op.get("target") or payload.get("target") or "memory")
               for op in (payload.get("operations") if payload.get("action") == "batch" else [payload]) or []
               if isinstance(op, dict)} or {"memory"}
    kept = extra.get("scopes")
    scopes: dict[str, str] = ({str(k): str(v) for k, v in kept.items()} if isinstance(kept, dict)
                              else {t: "" for t in sorted(targets)})
    try:
        created = float(record.get("created_at") or 0.0)
    except (TypeError, ValueError):
        created = 0.0
    return PendingWrite(name, dict(payload), scopes, provenance, created, hermes=True)


class _HermesFolder:
    """Hermes's pending folder seen by ironmem: one JSON record per held write; deciding one removes its file.

    A decision first renames the record to a hidden claim file (atomic: of two deciders, one wins; Hermes does
    not list it meanwhile), applies the write, then deletes the claim; a write that cannot apply is renamed back.
    A claim file left by a process that died while applying is put back by the next decider."""

    CLAIM = ".ironmem-claim"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, pending_id: str) -> Path:
        return self.folder / f"{pending_id}.json"

    def claim_path(self, pending_id: str) -> Path:
        return self.folder / f".{pending_id}{self.CLAIM}"

    def signature(self) -> tuple[int, int] | None:
        """Changes whenever a record is added or removed (the folder's mtime); None while it is too fresh to trust
        (two changes within one clock tick leave the same mtime)."""
        try:
            mtime = os.stat(self.folder).st_mtime_ns
        except FileNotFoundError:
            return (0, 0)
        return None if time.time_ns() - mtime < 50_000_000 else (mtime, 1)

    def records(self) -> dict[str, PendingWrite]:
        """The pending records in the folder (a claimed one counts: its decider may still put it back)."""
        out: dict[str, PendingWrite] = {}
        if not self.folder.is_dir():
            return out
        for path in self.folder.iterdir():
            name = path.name
            if name.endswith(".json") and not name.startswith("."):
                pid = name[: -len(".json")]
            elif name.startswith(".") and name.endswith(self.CLAIM):
                pid = name[1: -len(self.CLAIM)]
            else:
                continue
            try:
                found = _from_hermes(json.loads(path.read_text(encoding="utf-8-sig")), pid)
            except (OSError, ValueError):
                continue  # vanished meanwhile, or unreadable (Hermes skips those too)
            if found is not None:
                out[pid] = found
        return out

    def write(self, pending: PendingWrite) -> None:
        """Stage ``pending`` where Hermes lists it (its record format, plus ironmem's custody under ``ironmem``)."""
        record = {**pending.to_hermes(), "payload_sha256": _payload_sha256(pending.payload),
                  "ironmem": {"provenance": pending.provenance.to_dict(), "scopes": pending.scopes}}
        write_private(self.path(pending.id), (json.dumps(record, ensure_ascii=False, indent=2) + "\n").encode())

    def restore_orphans(self) -> None:
        """Put back the claims of deciders that died (called under the custody store's write lock, which every
        live decider holds while its claim exists)."""
        if not self.folder.is_dir():
            return
        for path in self.folder.glob(f".*{self.CLAIM}"):
            target = self.path(path.name[1: -len(self.CLAIM)])
            with contextlib.suppress(OSError):
                os.replace(path, target)

    def claim(self, pending_id: str) -> bool:
        """Take the record out of Hermes's list for deciding; False when it is gone (Hermes decided it)."""
        try:
            os.rename(self.path(pending_id), self.claim_path(pending_id))
        except FileNotFoundError:
            return False
        return True

    def release(self, pending_id: str) -> None:
        """The write could not apply: the record is pending again."""
        os.replace(self.claim_path(pending_id), self.path(pending_id))

    def consume(self, pending_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.claim_path(pending_id))


# ------------------------------------------------------------------------------------------------ SQLite
_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS custody_entries (
    scope TEXT NOT NULL, target TEXT NOT NULL, key TEXT NOT NULL,
    origin TEXT NOT NULL, source TEXT NOT NULL DEFAULT '', data TEXT NOT NULL,
    PRIMARY KEY (scope, target, key)
);
CREATE TABLE IF NOT EXISTS custody_turns (
    turn_id INTEGER PRIMARY KEY, origin TEXT NOT NULL, source TEXT NOT NULL DEFAULT '', data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS custody_pending (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, created REAL NOT NULL, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS custody_pending_status ON custody_pending (status, created);
CREATE TABLE IF NOT EXISTS custody_state (id INTEGER PRIMARY KEY CHECK (id = 1), held_version INTEGER NOT NULL);
INSERT OR IGNORE INTO custody_state VALUES (1, 0);
"""
_SQLITE_BUMP = "UPDATE custody_state SET held_version = held_version + 1 WHERE id = 1"

#: What a pending write that Hermes decided looks like here: Hermes deletes the record on approve and on reject
#: alike and keeps no trace of which, so ironmem says only that it was decided there.
_DECIDED_IN_HERMES = "decided in Hermes (its pending record is gone; Hermes does not record approve or reject)"


class SQLiteProvenance(ProvenanceStore):
    """The files backend's custody: a SQLite sidecar (``<home>/.ironmem/custody.db``), WAL, one locked connection.

    ``read_only`` opens an existing file without writing anything (a missing file reads as empty).
    ``hermes_pending`` is Hermes's pending folder when the home is a Hermes memory folder
    (:func:`hermes_pending_dir`): its records are pending writes here too (listed, approved, rejected), and a write
    ironmem holds for Hermes's own files is staged there as well, so Hermes's ``/memory pending`` lists it.

    The held writes are read once and kept until another connection commits (``PRAGMA data_version``), this one
    writes, or Hermes's folder changes: a turn's recall then costs one indexed query for the turns' provenance."""

    def __init__(self, path: str | Path, *, read_only: bool = False, hermes_pending: Path | None = None) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.hermes = _HermesFolder(Path(hermes_pending)) if hermes_pending is not None else None
        self._lock = threading.RLock()
        if read_only:
            if self.path.is_file():
                # no -wal file: no writer has it open; immutable=1 reads it without creating a -shm file
                live = self.path.with_name(self.path.name + "-wal").exists()
                mode = "mode=ro" if live else "mode=ro&immutable=1"
                self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?{mode}", uri=True,
                                             check_same_thread=False, timeout=30.0, isolation_level=None)
            else:
                self._conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
                self._conn.executescript(_SQLITE_SCHEMA)
        else:
            make_private_dirs(self.path.parent)
            create_private_file(self.path)  # 0600 before SQLite opens it (its journal files take the same mode)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0, isolation_level=None)
            enable_wal(self._conn)
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SQLITE_SCHEMA)
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._depth = 0  # open write transactions of this connection (decide() applies inside one)
        self._held: tuple[Any, list[PendingWrite]] | None = None  # (version, pending writes), see _held_writes

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._depth:  # already inside decide()'s transaction: join it
                yield self._conn
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")
            finally:
                self._depth -= 1

    # -- entries and turns ------------------------------------------------------------------------
    def record_entries(self, scope: str, target: str, texts: Iterable[str], provenance: Provenance) -> None:
        data = json.dumps(provenance.to_dict(), ensure_ascii=False)
        rows = [(scope, target, text_key(t), provenance.origin.value, provenance.source, data) for t in texts]
        if rows:
            with self._write() as conn:
                conn.executemany("INSERT OR REPLACE INTO custody_entries VALUES (?, ?, ?, ?, ?, ?)", rows)

    def _entry_rows(self, scope: str, target: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        marks = ",".join("?" * len(keys))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT key, data FROM custody_entries WHERE scope = ? AND target = ? AND key IN ({marks})",
                (scope, target, *keys),
            ).fetchall()
        return {k: json.loads(d) for k, d in rows}

    def record_turn(self, turn_id: int, provenance: Provenance) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO custody_turns VALUES (?, ?, ?, ?)",
                         (int(turn_id), provenance.origin.value, provenance.source,
                          json.dumps(provenance.to_dict(), ensure_ascii=False)))

    def turn_provenance(self, turn_ids: Iterable[int]) -> dict[int, Provenance]:
        ids = [int(i) for i in turn_ids]
        if not ids:
            return {}
        with self._lock:
            rows = self._conn.execute(
                f"SELECT turn_id, data FROM custody_turns WHERE turn_id IN ({','.join('?' * len(ids))})", ids
            ).fetchall()
        return {int(i): Provenance.from_dict(json.loads(d)) for i, d in rows}

    # -- pending writes ---------------------------------------------------------------------------
    def _version(self) -> Any:
        """A token that changes whenever the held writes may have changed (None: do not trust a cached list):
        the version every stage and decision bumps in its transaction, and the state of Hermes's folder."""
        folder = self.hermes.signature() if self.hermes is not None else (0, 0)
        if folder is None:
            return None
        try:
            row = self._conn.execute("SELECT held_version FROM custody_state WHERE id = 1").fetchone()
        except sqlite3.OperationalError:  # a file of an older ironmem, opened read-only: no version to trust
            return None
        return (row[0] if row else None, folder)

    def _resolve(self, row: PendingWrite, files: dict[str, PendingWrite]) -> PendingWrite:
        """A stored record as it stands now: one that is also Hermes's and whose file is gone was decided there."""
        if row.status == "pending" and row.hermes and row.id not in files:
            return replace(row, status="resolved", note=_DECIDED_IN_HERMES)
        return row

    def _all(self) -> list[PendingWrite]:
        """Every pending write of any status, oldest first: the table's, and Hermes's records it does not hold."""
        with self._lock:
            rows = [PendingWrite.from_dict(json.loads(r[0])) for r in self._conn.execute(
                "SELECT data FROM custody_pending").fetchall()]
        files = self.hermes.records() if self.hermes is not None else {}
        known = {r.id for r in rows}
        out = [self._resolve(r, files) for r in rows] + [f for pid, f in files.items() if pid not in known]
        out.sort(key=lambda p: (p.created, p.id))
        return out

    def _held_writes(self) -> list[PendingWrite]:
        """The writes still pending, oldest first, read again only when something changed (see :meth:`_version`)."""
        with self._lock:
            version = self._version()
            if version is not None and self._held is not None and self._held[0] == version:
                return self._held[1]
            if self.hermes is None:
                held = [PendingWrite.from_dict(json.loads(r[0])) for r in self._conn.execute(
                    "SELECT data FROM custody_pending WHERE status = 'pending' ORDER BY created, id").fetchall()]
            else:
                held = [p for p in self._all() if p.status == "pending"]
            self._held = (version, held)
            return held

    def recall_custody(self, turn_ids: Iterable[int], *, held: int = 200) -> tuple[dict[int, Provenance],
                                                                                  list[PendingWrite]]:
        return self.turn_provenance(turn_ids), (self._held_writes()[:held] if held else [])

    def stage(self, pending: PendingWrite) -> PendingWrite:
        with self._write() as conn:
            row = conn.execute("SELECT data FROM custody_pending WHERE id = ?", (pending.id,)).fetchone()
            if row is not None:
                return PendingWrite.from_dict(json.loads(row[0]))
            if self.hermes is not None and pending.scopes and not any(pending.scopes.values()):
                pending = replace(pending, hermes=True)  # Hermes's own files: Hermes lists it too
                self.hermes.write(pending)
            conn.execute("INSERT INTO custody_pending VALUES (?, ?, ?, ?)",
                         (pending.id, pending.status, pending.created, json.dumps(pending.to_dict(), ensure_ascii=False)))
            conn.execute(_SQLITE_BUMP)
        return pending

    def get(self, pending_id: str) -> PendingWrite | None:
        with self._lock:
            row = self._conn.execute("SELECT data FROM custody_pending WHERE id = ?", (str(pending_id),)).fetchone()
        if self.hermes is None:
            return PendingWrite.from_dict(json.loads(row[0])) if row else None
        files = self.hermes.records()
        if row is not None:
            return self._resolve(PendingWrite.from_dict(json.loads(row[0])), files)
        return files.get(str(pending_id))

    def pending(self, *, status: str = "pending", limit: int = 1000) -> list[PendingWrite]:
        if status == "pending":
            return self._held_writes()[: int(limit)]
        if self.hermes is not None:
            found = self._all()
            return [p for p in found if status == "all" or p.status == status][: int(limit)]
        query = "SELECT data FROM custody_pending"
        params: tuple[Any, ...] = ()
        if status != "all":
            query += " WHERE status = ?"
            params = (status,)
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY created, id LIMIT ?", (*params, int(limit))).fetchall()
        return [PendingWrite.from_dict(json.loads(r[0])) for r in rows]

    def decide(self, pending_id: str, status: str, *, apply: Apply | None = None, by: str = "",
               note: str = "", edited: dict[str, Any] | None = None) -> PendingWrite:
        _check_status(status)
        pending_id = str(pending_id)
        with self._write() as conn:
            row = conn.execute("SELECT data FROM custody_pending WHERE id = ?", (pending_id,)).fetchone()
            found = PendingWrite.from_dict(json.loads(row[0])) if row is not None else None
            hermes = self.hermes
            if hermes is not None:
                hermes.restore_orphans()
                if found is None:
                    found = hermes.records().get(pending_id)
            if found is None:
                raise _unknown(pending_id)
            if found.status != "pending" or hermes is None or not found.hermes:
                done = self._decided(found, status, by, note, apply, edited)
            elif not hermes.claim(pending_id):  # Hermes decided it: its record is gone (reads say so too)
                raise PendingWriteError(f"pending write {pending_id} was already {_DECIDED_IN_HERMES}; nothing was "
                                        "changed. List the open ones with `ironmem review`")
            else:
                try:
                    done = self._decided(found, status, by, note, apply, edited)
                except BaseException:
                    hermes.release(pending_id)
                    raise
                hermes.consume(pending_id)  # before the commit: Hermes must never apply a write decided here
            conn.execute("INSERT OR REPLACE INTO custody_pending VALUES (?, ?, ?, ?)",
                         (done.id, done.status, done.created, json.dumps(done.to_dict(), ensure_ascii=False)))
            conn.execute(_SQLITE_BUMP)
        return done

    # -- audit ------------------------------------------------------------------------------------
    def entry_records(self) -> list[tuple[str, str, str, Provenance]]:
        with self._lock:
            rows = self._conn.execute("SELECT scope, target, key, data FROM custody_entries").fetchall()
        return [(s, t, k, Provenance.from_dict(json.loads(d))) for s, t, k, d in rows]

    def turn_records(self) -> list[tuple[int, Provenance]]:
        with self._lock:
            rows = self._conn.execute("SELECT turn_id, data FROM custody_turns ORDER BY turn_id").fetchall()
        return [(int(i), Provenance.from_dict(json.loads(d))) for i, d in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# ------------------------------------------------------------------------------------------------ PostgreSQL
_PG_LOCK_CLASS = 0x1E40  # advisory lock class for creating the custody tables (second key: the schema's hash)
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS {s}.custody_entries (
    scope text NOT NULL, target text NOT NULL, key text NOT NULL,
    origin text NOT NULL, source text NOT NULL DEFAULT '', data jsonb NOT NULL,
    PRIMARY KEY (scope, target, key)
);
CREATE TABLE IF NOT EXISTS {s}.custody_turns (
    turn_id bigint PRIMARY KEY, origin text NOT NULL, source text NOT NULL DEFAULT '', data jsonb NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.custody_pending (
    id text PRIMARY KEY, status text NOT NULL, created double precision NOT NULL, data jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS custody_pending_status ON {s}.custody_pending (status, created);
CREATE TABLE IF NOT EXISTS {s}.custody_state (
    id int PRIMARY KEY CHECK (id = 1), held_version bigint NOT NULL
);
INSERT INTO {s}.custody_state VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
"""
#: Bumps the version of the held writes, in the statement or transaction that changes them (see recall_custody).
_PG_BUMP = "UPDATE {s}.custody_state SET held_version = held_version + 1 WHERE id = 1"


class PostgresProvenance(ProvenanceStore):
    """The PostgreSQL backend's custody: tables in the storage's schema, through its connection pool and retries.

    Per turn it costs one round trip: the recalled turns' provenance and the version of the held writes in one
    statement (the held writes themselves are read again only when their version moved: every stage and decision
    bumps it in the same transaction, so a reader that sees the new version sees the new rows); a tainted turn's
    provenance is written by the statement that stores the turn (:meth:`index_turn`)."""

    def __init__(self, storage: PostgresStorage, *, read_only: bool = False) -> None:
        self.storage = storage
        self.s = storage.schema
        self.read_only = read_only
        self._bump = _PG_BUMP.format(s=self.s)
        self._held: tuple[int, list[PendingWrite]] | None = None
        self._held_lock = threading.Lock()
        if not read_only:
            self._create()

    def _create(self) -> None:
        sql = _PG_SCHEMA.format(s=self.s)

        def create(conn: Any) -> None:
            exists = conn.execute("SELECT to_regclass(%s)", (f"{self.s}.custody_state",)).fetchone()[0]
            if exists:
                return
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_PG_LOCK_CLASS, self.s))
                conn.execute(sql.encode())

        self.storage.run("creating the custody tables", create)

    def _run(self, what: str, fn: Callable[[Any], Any], written: str = "Nothing was written.") -> Any:
        return self.storage.run(what, fn, written=written)

    def record_entries(self, scope: str, target: str, texts: Iterable[str], provenance: Provenance) -> None:
        data = json.dumps(provenance.to_dict(), ensure_ascii=False)
        rows = [(scope, target, text_key(t), provenance.origin.value, provenance.source, data) for t in texts]
        if not rows:
            return

        def insert(conn: Any) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {self.s}.custody_entries VALUES (%s, %s, %s, %s, %s, %s::jsonb) "
                    "ON CONFLICT (scope, target, key) DO UPDATE SET origin = EXCLUDED.origin, "
                    "source = EXCLUDED.source, data = EXCLUDED.data", rows)

        self._run("recording the provenance of an entry", insert)

    def _entry_rows(self, scope: str, target: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        def query(conn: Any) -> dict[str, dict[str, Any]]:
            rows = conn.execute(
                f"SELECT key, data FROM {self.s}.custody_entries WHERE scope = %s AND target = %s AND key = ANY(%s)",
                (scope, target, keys)).fetchall()
            return {k: d for k, d in rows}

        result: dict[str, dict[str, Any]] = self._run("reading provenance", query, "")
        return result

    def record_turn(self, turn_id: int, provenance: Provenance) -> None:
        def insert(conn: Any) -> None:
            conn.execute(
                f"INSERT INTO {self.s}.custody_turns VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (turn_id) DO UPDATE "
                "SET origin = EXCLUDED.origin, source = EXCLUDED.source, data = EXCLUDED.data",
                (int(turn_id), provenance.origin.value, provenance.source, json.dumps(provenance.to_dict())))

        self._run("recording the provenance of a turn", insert)

    def index_turn(self, index: Any, session_id: str, user: str, assistant: str, *, user_id: str | None,
                   ts: float | None, provenance: Provenance | None) -> int:
        """The turn and its provenance in one statement of the turn's own transaction: both land or neither (a
        tainted turn can never be stored looking clean), and custody adds no round trip."""
        from .postgres import PostgresIndex

        if provenance is None or not isinstance(index, PostgresIndex) or index.storage is not self.storage:
            return super().index_turn(index, session_id, user, assistant, user_id=user_id, ts=ts,
                                      provenance=provenance)
        custody = (provenance.origin.value, provenance.source, json.dumps(provenance.to_dict()))
        return int(index.add_turn(session_id, user, assistant, user_id=user_id, ts=ts, custody=custody))

    def turn_provenance(self, turn_ids: Iterable[int]) -> dict[int, Provenance]:
        ids = [int(i) for i in turn_ids]
        if not ids:
            return {}

        def query(conn: Any) -> dict[int, Provenance]:
            rows = conn.execute(f"SELECT turn_id, data FROM {self.s}.custody_turns WHERE turn_id = ANY(%s)",
                                (ids,)).fetchall()
            return {int(i): Provenance.from_dict(d) for i, d in rows}

        result: dict[int, Provenance] = self._run("reading turn provenance", query, "")
        return result

    #: Held writes recall looks at (the newest are shown first; a longer queue is for ``ironmem review``).
    HELD_CACHE = 1000

    def recall_custody(self, turn_ids: Iterable[int], *, held: int = 200) -> tuple[dict[int, Provenance],
                                                                                  list[PendingWrite]]:
        ids = [int(i) for i in turn_ids]
        s = self.s

        def query(conn: Any) -> tuple[dict[int, Provenance], list[PendingWrite]]:
            rows = conn.execute(
                f"SELECT 'v', held_version, NULL::jsonb FROM {s}.custody_state UNION ALL "
                f"SELECT 't', turn_id, data FROM {s}.custody_turns WHERE turn_id = ANY(%s)", (ids,)).fetchall()
            turns = {int(key): Provenance.from_dict(data) for kind, key, data in rows if kind == "t"}
            version = next((int(key) for kind, key, _ in rows if kind == "v"), None)
            if not held:
                return turns, []
            with self._held_lock:
                cached = self._held
            if version is None or cached is None or cached[0] != version:
                cached = self._read_held(conn)
            return turns, cached[1][:held]

        result: tuple[dict[int, Provenance], list[PendingWrite]] = self._run("reading custody for recall", query, "")
        return result

    def _read_held(self, conn: Any) -> tuple[int, list[PendingWrite]]:
        """The held writes with their version, from one snapshot (one statement), kept for the next turns."""
        rows = conn.execute(
            f"SELECT 'v', held_version::text, NULL::jsonb FROM {self.s}.custody_state UNION ALL "
            f"(SELECT 'p', id, data FROM {self.s}.custody_pending WHERE status = 'pending' "
            "ORDER BY created, id LIMIT %s)", (self.HELD_CACHE,)).fetchall()
        version = next((int(key) for kind, key, _ in rows if kind == "v"), -1)
        found = (version, [PendingWrite.from_dict(data) for kind, _, data in rows if kind == "p"])
        with self._held_lock:
            self._held = found
        return found

    def stage(self, pending: PendingWrite) -> PendingWrite:
        def insert(conn: Any) -> PendingWrite:
            row = conn.execute(
                f"WITH new AS (INSERT INTO {self.s}.custody_pending VALUES (%s, %s, %s, %s::jsonb) "
                "ON CONFLICT (id) DO NOTHING RETURNING id), "
                f"bump AS ({self._bump} AND EXISTS (SELECT 1 FROM new)) SELECT id FROM new",
                (pending.id, pending.status, pending.created, json.dumps(pending.to_dict()))).fetchone()
            if row is not None:
                return pending
            found = conn.execute(f"SELECT data FROM {self.s}.custody_pending WHERE id = %s", (pending.id,)).fetchone()
            return PendingWrite.from_dict(found[0])

        result: PendingWrite = self._run("holding a memory write for approval", insert, "The write was not held.")
        return result

    def get(self, pending_id: str) -> PendingWrite | None:
        def query(conn: Any) -> PendingWrite | None:
            row = conn.execute(f"SELECT data FROM {self.s}.custody_pending WHERE id = %s", (str(pending_id),)).fetchone()
            return PendingWrite.from_dict(row[0]) if row else None

        result: PendingWrite | None = self._run("reading a pending write", query, "")
        return result

    def pending(self, *, status: str = "pending", limit: int = 1000) -> list[PendingWrite]:
        where = "" if status == "all" else "WHERE status = %s"
        params: tuple[Any, ...] = () if status == "all" else (status,)

        def query(conn: Any) -> list[PendingWrite]:
            rows = conn.execute(f"SELECT data FROM {self.s}.custody_pending {where} ORDER BY created, id LIMIT %s",
                                (*params, int(limit))).fetchall()
            return [PendingWrite.from_dict(r[0]) for r in rows]

        result: list[PendingWrite] = self._run("listing pending writes", query, "")
        return result

    def decide(self, pending_id: str, status: str, *, apply: Apply | None = None, by: str = "",
               note: str = "", edited: dict[str, Any] | None = None) -> PendingWrite:
        _check_status(status)

        def attempt(conn: Any) -> PendingWrite:
            with conn.transaction():
                row = conn.execute(f"SELECT data FROM {self.s}.custody_pending WHERE id = %s FOR UPDATE",
                                   (str(pending_id),)).fetchone()
                if row is None:
                    raise _unknown(pending_id)
                done = self._decided(PendingWrite.from_dict(row[0]), status, by, note, apply, edited)
                conn.execute(f"UPDATE {self.s}.custody_pending SET status = %s, data = %s::jsonb WHERE id = %s",
                             (done.status, json.dumps(done.to_dict()), done.id))
                conn.execute(self._bump)  # last: the version row is held only until the commit
                return done

        result: PendingWrite = self._run(f"deciding pending write {pending_id}", attempt,
                                         "The write stays pending.")
        return result

    def entry_records(self) -> list[tuple[str, str, str, Provenance]]:
        def query(conn: Any) -> list[tuple[str, str, str, Provenance]]:
            rows = conn.execute(f"SELECT scope, target, key, data FROM {self.s}.custody_entries").fetchall()
            return [(s, t, k, Provenance.from_dict(d)) for s, t, k, d in rows]

        result: list[tuple[str, str, str, Provenance]] = self._run("reading provenance", query, "")
        return result

    def turn_records(self) -> list[tuple[int, Provenance]]:
        def query(conn: Any) -> list[tuple[int, Provenance]]:
            rows = conn.execute(f"SELECT turn_id, data FROM {self.s}.custody_turns ORDER BY turn_id").fetchall()
            return [(int(i), Provenance.from_dict(d)) for i, d in rows]

        result: list[tuple[int, Provenance]] = self._run("reading turn provenance", query, "")
        return result

    def close(self) -> None:  # the storage owns the pool
        return None


def open_provenance(storage: MemoryStorage, *, home: Path, read_only: bool = False) -> ProvenanceStore:
    """The custody store that sits beside ``storage``: the SQLite sidecar for files, tables for PostgreSQL."""
    from .storage import FileStorage

    if isinstance(storage, FileStorage) or getattr(storage, "kind", "") == "files":
        return SQLiteProvenance(Path(home) / ".ironmem" / "custody.db", read_only=read_only,
                                hermes_pending=hermes_pending_dir(Path(home)))
    if getattr(storage, "kind", "") == "postgresql":
        return PostgresProvenance(storage, read_only=read_only)  # type: ignore[arg-type]
    # Another MemoryStorage (a test double, a custom backend): keep custody in a sidecar under the home.
    return SQLiteProvenance(Path(home) / ".ironmem" / "custody.db", read_only=read_only)

