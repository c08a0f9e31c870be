"""Export and import: one versioned JSONL format for everything a memory home holds (``ironmem export/import``).

Format ``ironmem`` version 2 (docs/export.md): UTF-8 JSON Lines, one record per line, keys sorted, so two exports
of the same memory are the same bytes. The first line is the header; every other record has a ``kind``:

``header``
    ``{"format": "ironmem", "kind": "header", "version": 2}``. Version 1 files (no archive, provenance or pending
    records) are read too; a higher version is refused with what to do.
``setting``
    ``{"key": "memory_char_limit", "value": 2200}``: the limits, per-user notes, overflow, tool and recall budgets.
    The custody policy (trusted tools, write approval) is never carried: a file cannot loosen the policy of the
    home it is imported into. What import does with settings: :func:`plan_settings`.
``entry``
    One entry of ``MEMORY.md`` (``target: memory``) or ``USER.md`` (``user``) of the shared files (``user_id:
    null``) or a user's own, with ``status``: ``current`` (in the file, in file order), ``archived`` (moved out of
    a full file: ``archived_at``) or ``superseded`` (replaced or merged: ``valid_from`` .. ``valid_to``,
    ``replaced_by``). Optional: ``provenance`` (origin, source, session, user, time, untrusted inputs; absent when
    nobody recorded one: a hand edit) and ``created_at``. Dates are Unix seconds.
``archive``
    One record of the archive log of (``target``, ``user_id``), verbatim (format ``ironmem-archive``, see
    :mod:`ironmem.core.builtin.archive`): the history of what moved, when and why. Import appends the ones the
    home does not hold (by ``id``), so the archived and superseded versions, their dates and recall counts come
    back exactly; an ``entry`` whose state no ``archive`` record gives (a file written by another tool) gets one
    made from its dates.
``turn``
    Every synced turn, in stored order, with ``provenance`` when untrusted input entered it.
``pending``
    Every held write and its decision (:class:`~ironmem.core.builtin.provenance.PendingWrite`).
``store_item``
    Items of the LangGraph store over this memory (:mod:`ironmem.core.items`).

A record of a kind (or an entry of a status) this ironmem does not know is never dropped: import keeps it in
``<home>/.ironmem/import-unclaimed.jsonl`` and says so.

Import sources: this format, a Hermes memory folder (``MEMORY.md`` / ``USER.md`` with ``§`` separators, or a
Hermes root with ``memories/``), and the items of a LangGraph store (``store_item`` records:
``ironmem.adapters.langchain.store.store_records``). Every text is judged by the custody policy under its
recorded origin (an import when none is recorded); what is refused is listed with the reason and the rest
imports; what the policy holds becomes a pending write.

Example:
    >>> import io, tempfile
    >>> from ironmem import MemoryManager
    >>> source = MemoryManager(home=tempfile.mkdtemp())
    >>> _ = source.start_session("s").handle_tool_call("memory", {"action": "add", "target": "user",
    ...                                                            "content": "Ada prefers green tea"})
    >>> buffer = io.StringIO(); _ = export_memory(source, buffer)
    >>> target = MemoryManager(home=tempfile.mkdtemp())
    >>> import_records(target, read_records(io.StringIO(buffer.getvalue()))).added
    1
    >>> target.builtin.state("user").entries
    ('Ada prefers green tea',)
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .custody import Origin, Provenance, text_key
from .errors import ConfigError, MemoryFileError

if TYPE_CHECKING:  # pragma: no cover
    from .builtin.archive import Record
    from .manager import MemoryManager

__all__ = [
    "FORMAT",
    "VERSION",
    "ImportResult",
    "SettingsPlan",
    "export_memory",
    "export_records",
    "header",
    "hermes_records",
    "import_records",
    "plan_settings",
    "read_records",
]

FORMAT = "ironmem"
VERSION = 2
TARGETS = ("memory", "user")
STATUSES = ("current", "archived", "superseded")
#: The settings an export records: keys of config.yaml's ``memory:`` section.
SETTINGS = ("memory_char_limit", "memory_per_user", "overflow", "prefetch_timeout", "tool_budget",
            "user_char_limit")
_NO_LIMIT = 2**62


def header() -> dict[str, Any]:
    """The first record of every file in this format."""
    return {"format": FORMAT, "kind": "header", "version": VERSION}


# --------------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------------
def _settings(manager: MemoryManager) -> dict[str, Any]:
    builtin = manager.builtin
    out: dict[str, Any] = {"memory_char_limit": builtin.limits["memory"], "user_char_limit": builtin.limits["user"],
                           "overflow": builtin.overflow}
    for key in ("memory_per_user", "prefetch_timeout", "tool_budget"):
        out[key] = getattr(manager, key, None)
    return out


def _scopes(manager: MemoryManager) -> list[str]:
    return ["", *sorted(manager.builtin.known_scopes())]


def _entry(target: str, scope: str, text: str, status: str, provenance: Provenance | None,
           **dates: Any) -> dict[str, Any]:
    record = {"kind": "entry", "target": target, "user_id": scope or None, "text": text, "status": status,
              **{k: v for k, v in dates.items() if v is not None}}
    if provenance is not None:
        record["provenance"] = provenance.to_dict()
    return record


def export_records(manager: MemoryManager) -> Iterator[dict[str, Any]]:
    """Every record of ``manager``'s memory, header first, in the format's fixed order."""
    from .builtin.archive import ArchiveState

    builtin = manager.builtin
    yield header()
    for key, value in sorted(_settings(manager).items()):
        yield {"kind": "setting", "key": key, "value": value}
    custody = {(s, t, k): p for s, t, k, p in builtin.custody.entry_records()}
    for scope in _scopes(manager):
        for target in TARGETS:
            state = builtin.file(target, scope).read()
            if state.corrupt:
                raise MemoryFileError(f"{state.corrupt}; fix or delete the file, then export again (nothing was "
                                      "exported)")
            log = builtin.archive_records(target, scope)
            folded = ArchiveState()
            folded.apply(log)

            def prov(text: str, scope: str = scope, target: str = target) -> Provenance | None:
                return custody.get((scope, target, text_key(text)))

            for text in state.entries:
                yield _entry(target, scope, text, "current", prov(text), created_at=folded.written_at(text))
            for record in folded.archived_now(state.entries):
                yield _entry(target, scope, record.text, "archived", prov(record.text), created_at=record.since,
                             archived_at=record.at)
            for record in folded.superseded_now(state.entries):
                yield _entry(target, scope, record.text, "superseded", prov(record.text), valid_from=record.since,
                             valid_to=record.at, replaced_by=record.by)
            for record in log:
                yield {"kind": "archive", "target": target, "user_id": scope or None, **record.to_json()}
    all_turns = getattr(builtin.index, "all_turns", None)
    if all_turns is None:
        raise ConfigError("this storage cannot list its turns for export; export needs files + SQLite or PostgreSQL")
    tainted = _turn_provenance(manager)
    for session_id, user_id, ts, user, assistant in all_turns():
        turn = {"kind": "turn", "session_id": session_id, "user_id": user_id, "ts": ts, "user": user,
                "assistant": assistant}
        found = tainted.get((session_id, user_id, ts, user, assistant))
        if found:
            turn["provenance"] = found.pop(0).to_dict()
        yield turn
    for pending in builtin.custody.pending(status="all", limit=_NO_LIMIT):
        yield {"kind": "pending", **pending.to_dict()}
    table = _item_table(manager, create=False)
    if table is not None:
        try:
            for item in table.items():
                yield {"kind": "store_item", "namespace": list(item.namespace), "key": item.key,
                       "value": item.value, "created_at": item.created_at, "updated_at": item.updated_at}
        finally:
            table.close()


TurnKey = tuple[str, "str | None", float, str, str]


def _turn_provenance(manager: MemoryManager) -> dict[TurnKey, list[Provenance]]:
    """The recorded provenance of turns (custody keeps it by turn id), keyed by the turn's row as ``all_turns``
    gives it (a list: two identical rows keep their provenances in id order)."""
    records = manager.builtin.custody.turn_records()
    if not records:
        return {}
    by_id = dict(records)
    ids = sorted(by_id)
    storage = manager.builtin.storage
    if getattr(storage, "kind", "") == "postgresql":
        schema = storage.schema  # type: ignore[attr-defined]
        rows = storage.run("reading turns", lambda conn: conn.execute(  # type: ignore[attr-defined]
            f"SELECT id, session_id, user_id, ts, user_text, assistant_text FROM {schema}.turns "
            "WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall(), written="")
    else:
        rows = manager.builtin.index.load(ids, user_id=None, exclude_session=None)  # type: ignore[union-attr]
    out: dict[TurnKey, list[Provenance]] = {}
    for row in rows:
        key = (str(row[1]), row[2], float(row[3]), str(row[4]), str(row[5]))
        out.setdefault(key, []).append(by_id[int(row[0])])
    return out


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def export_memory(manager: MemoryManager, out: IO[str]) -> Counter[str]:
    """Write every record to ``out``; returns how many of each kind."""
    counts: Counter[str] = Counter()
    for record in export_records(manager):
        out.write(_line(record))
        counts[record["kind"]] += 1
    return counts


def _item_table(manager: MemoryManager, *, create: bool) -> Any:
    from .items import ItemTable

    path = manager.home / ".ironmem" / "items.db"
    if not path.exists() and not create:
        return None
    return ItemTable(path, read_only=manager.builtin.read_only)


# --------------------------------------------------------------------------------------------------
# Reading sources
# --------------------------------------------------------------------------------------------------
def read_records(source: IO[str], *, name: str = "the export") -> Iterator[dict[str, Any]]:
    """Records of an ironmem export, checked line by line (a bad line is an error naming it)."""
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{name}, line {number}: not JSON ({exc}); is this an `ironmem export` file?") from None
        if not isinstance(record, dict) or "kind" not in record:
            raise ConfigError(f"{name}, line {number}: a record is a JSON object with a 'kind'")
        if number == 1 or record["kind"] == "header":
            if record.get("format") != FORMAT or record.get("kind") != "header":
                raise ConfigError(f"{name}: the first line is not an ironmem export header; export with "
                                  "`ironmem export`, or import a Hermes folder by its path")
            if not isinstance(record.get("version"), int) or record["version"] > VERSION:
                raise ConfigError(f"{name}: format version {record.get('version')!r} is newer than this ironmem "
                                  f"reads ({VERSION}); upgrade ironmem (pip install -U ironmem)")
        yield record


def hermes_records(folder: str | os.PathLike[str], *, user_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Records of a Hermes memory folder: every entry of its ``MEMORY.md`` and ``USER.md`` (``§`` separated),
    for the shared files (or ``user_id``'s), with provenance origin ``import``."""
    from .builtin.store import parse_entries
    from .home import memory_folder

    path = memory_folder(folder)
    files = {t: path / n for t, n in (("memory", "MEMORY.md"), ("user", "USER.md"))}
    if not any(f.is_file() for f in files.values()):
        raise ConfigError(f"{folder} holds no MEMORY.md or USER.md; pass a Hermes memory folder "
                          "(~/.hermes/memories) or an `ironmem export` file")
    yield header()
    for target, file in files.items():
        if not file.is_file():
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{file} is not UTF-8 text (byte {exc.start}); fix it, then import again") from None
        for entry in parse_entries(text):
            yield {"kind": "entry", "target": target, "user_id": user_id, "text": entry, "status": "current",
                   "provenance": {"origin": "import", "source": f"hermes:{file}"}}


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------
@dataclass
class SettingsPlan:
    """What import does with the exported settings (:func:`plan_settings`).

    ``action``: ``"write"`` (create ``path`` with them), ``"update"`` (change the differing keys of ``path``),
    ``"keep"`` (leave ``path`` as it is and report ``differ``) or ``"none"`` (nothing differs or nothing given)."""

    path: Path
    action: str
    settings: dict[str, Any]
    differ: dict[str, tuple[Any, Any]]  # key -> (in the source, in the config now)
    exists: bool

    def apply(self, *, home: Path, source: str) -> Path | None:
        """Write the config (atomically, owner-only); returns the copy of the previous file, if one was replaced.
        Comments of a replaced file are not kept: the copy is."""
        import yaml

        from .fileio import write_atomic

        if self.action not in ("write", "update"):
            return None
        backup = None
        if self.action == "update":
            previous = self.path.read_bytes()
            data = yaml.safe_load(previous) or {}
            data.setdefault("memory", {}).update({k: self.settings[k] for k in self.differ})
            backup = self.path.with_name(f"{self.path.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
            write_atomic(backup, previous, mode=0o600)
        else:
            data = {"memory": {"home": str(home), **self.settings}}
        header = (f"# ironmem configuration; settings imported from {source} by `ironmem import`.\n"
                  "# Check it with `ironmem doctor`; every setting: docs/configuration.md\n")
        write_atomic(self.path, (header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)).encode("utf-8"),
                     mode=0o600)
        return backup


def plan_settings(records: Iterable[dict[str, Any]], config: Path, *, mode: str = "auto") -> SettingsPlan:
    """What to do with the ``setting`` records of an import for the config file ``config``.

    ``mode``: ``"auto"`` writes a config that does not exist yet and leaves an existing one (the difference is
    reported); ``"apply"`` also updates an existing one (keeping a copy); ``"keep"`` never writes. Exported values
    are validated as config.yaml's ``memory:`` section first (:class:`ConfigError` names a bad one)."""
    from .config import MemorySettings, _read_yaml, _validate

    if mode not in ("auto", "apply", "keep"):
        raise ConfigError(f"unknown settings mode {mode!r}; use auto, apply or keep")
    given = {str(r.get("key")): r.get("value") for r in records
             if r.get("kind") == "setting" and r.get("key") in SETTINGS}
    wanted = _validate("memory (from the export's settings)", MemorySettings, given).model_dump(include=set(given))
    exists = config.is_file()
    try:
        section = (_read_yaml(config).get("memory") or {}) if exists else {}
        if not isinstance(section, dict):
            raise ConfigError(f"{config}: its memory section is not a mapping")
        now = _validate("memory", MemorySettings, {k: v for k, v in section.items() if k in SETTINGS}).model_dump()
    except ConfigError as exc:
        if mode == "keep":  # nothing will be written: the config is not this import's business
            return SettingsPlan(config, "none", wanted, {}, exists)
        raise ConfigError(f"{exc}; fix it, or import with --settings keep (nothing was imported)") from None
    differ = {k: (v, now[k]) for k, v in wanted.items() if now[k] != v}
    if not exists:  # the defaults are what the home runs with now: ``differ`` is what the new file changes
        action = "write" if wanted and mode != "keep" else "none"
    elif not differ:
        action = "none"
    else:
        action = "update" if mode == "apply" else "keep"
    return SettingsPlan(config, action, wanted, differ, exists)


# --------------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    """What an import did (or, with ``dry_run``, would do)."""

    dry_run: bool = False
    added: int = 0
    present: int = 0
    archived: int = 0  # entries that went to the archive because the file was full
    held: int = 0  # entries the custody policy held for approval (pending writes)
    history_added: int = 0  # archive log records
    history_present: int = 0
    turns_added: int = 0
    turns_present: int = 0
    pending_added: int = 0
    pending_present: int = 0
    items_added: int = 0
    items_present: int = 0
    refused: list[str] = field(default_factory=list)
    settings_differ: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    unclaimed: Counter[str] = field(default_factory=Counter)
    unclaimed_path: str | None = None
    new_entries: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "entries": {"added": self.added, "present": self.present, "archived": self.archived, "held": self.held},
            "archive_records": {"added": self.history_added, "present": self.history_present},
            "turns": {"added": self.turns_added, "present": self.turns_present},
            "pending": {"added": self.pending_added, "present": self.pending_present},
            "store_items": {"added": self.items_added, "present": self.items_present},
            "refused": self.refused,
            "settings_differ": {k: {"file": a, "here": b} for k, (a, b) in self.settings_differ.items()},
            "unclaimed": dict(self.unclaimed), "unclaimed_path": self.unclaimed_path,
            "new_entries": self.new_entries, "notes": self.notes,
        }


@dataclass
class _Group:
    """The records of one (scope, target): entries by status, and the archive log."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    log: list[Record] = field(default_factory=list)


def _entry_target(record: dict[str, Any]) -> tuple[str, str, str]:
    target, text = record.get("target"), record.get("text")
    if target not in TARGETS or not isinstance(text, str) or not text.strip():
        raise ConfigError(f"an entry record needs target memory|user and a non-empty text, got {record!r:.120}")
    return target, _scope(record), text


def _scope(record: dict[str, Any]) -> str:
    user_id = record.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise ConfigError(f"a record's user_id is a string or null, got {user_id!r:.60}")
    return user_id or ""


def _provenance(record: dict[str, Any]) -> Provenance | None:
    found = record.get("provenance")
    if found is None:
        return None
    if not isinstance(found, dict):
        raise ConfigError(f"a record's provenance is an object, got {found!r:.60}")
    return Provenance.from_dict(found)


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key} is a date in Unix seconds, got {value!r:.40} in {record!r:.120}")
    return float(value)


def import_records(manager: MemoryManager, records: Iterable[dict[str, Any]], *,
                   dry_run: bool = False) -> ImportResult:
    """Add ``records`` to ``manager``'s memory: entries not already there (with their archive history, dates and
    provenance), turns, pending writes and store items not already stored. Every record is read and checked
    before anything is written (a bad record is a :class:`ConfigError` and nothing changes). ``dry_run`` changes
    nothing and reports the difference. A text the policy refuses is listed in ``refused``; nothing else is lost."""
    from .builtin.archive import Record
    from .builtin.provenance import PendingWrite
    from .items import entry_namespace, item_text

    result = ImportResult(dry_run=dry_run)
    here = _settings(manager)
    groups: dict[tuple[str, str], _Group] = {}
    turns: list[tuple[TurnKey, Provenance | None]] = []
    pending: list[PendingWrite] = []
    items: list[dict[str, Any]] = []
    unclaimed: list[dict[str, Any]] = []
    for record in records:
        kind = record.get("kind")
        if kind == "header":
            continue
        if kind == "setting":
            key = record.get("key")
            if key in here and here[key] != record.get("value"):
                result.settings_differ[str(key)] = (record.get("value"), here[key])
        elif kind == "entry" and record.get("status", "current") in STATUSES:
            target, scope, _ = _entry_target(record)
            _provenance(record)
            for key in ("created_at", "archived_at", "valid_from", "valid_to"):
                _number(record, key)
            groups.setdefault((scope, target), _Group()).entries.append(record)
        elif kind == "archive":
            found = Record.from_json(record) if record.get("target") in TARGETS else None
            if found is None:
                raise ConfigError(f"an archive record needs target memory|user, event, text and at, got "
                                  f"{record!r:.120}")
            groups.setdefault((_scope(record), str(record["target"])), _Group()).log.append(found)
        elif kind == "turn":
            try:
                key = (str(record["session_id"]), record.get("user_id"), float(record["ts"]), str(record["user"]),
                       str(record["assistant"]))
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"a turn record needs session_id, ts, user and assistant, got {record!r:.120}") \
                    from None
            _scope(record)
            turns.append((key, _provenance(record)))
        elif kind == "pending":
            try:
                found_pending = PendingWrite.from_dict(record)
                found_pending.operations()  # its payload parses as a memory write
                if found_pending.status not in ("pending", "approved", "rejected"):
                    raise ValueError(f"unknown status {found_pending.status!r}")
            except Exception as exc:
                raise ConfigError(f"a pending record is a held write as `ironmem export` writes it ({exc}); got "
                                  f"{record!r:.120}") from None
            pending.append(found_pending)
        elif kind == "store_item":
            items.append(record)
            mapped = entry_namespace(record.get("namespace") or ())
            if mapped is not None:  # a memory namespace: its text is an entry too (present when already there)
                target, user = mapped
                scope = manager.scopes_for(user, memory_per_user=True)[target]  # a user's namespace: their own file
                text = item_text(record.get("value"))
                if text.strip():
                    groups.setdefault((scope, target), _Group()).entries.append(
                        {"kind": "entry", "target": target, "user_id": scope or None, "text": text,
                         "status": "current", "provenance": {"origin": "import", "source": "langgraph store"}})
        else:
            unclaimed.append(record)
            result.unclaimed[str(kind if kind != "entry" else f"entry:{record.get('status')}")] += 1
    if not dry_run and manager.builtin.read_only:
        from .errors import ReadOnlyError

        raise ReadOnlyError("the memory was opened read-only; nothing was imported")
    for (scope, target), group in groups.items():
        _import_group(manager, scope, target, group, result, dry_run)
    _import_turns(manager, turns, result, dry_run)
    _import_pending(manager, pending, result, dry_run)
    _import_items(manager, items, result, dry_run)
    if unclaimed and not dry_run:
        path = manager.home / ".ironmem" / "import-unclaimed.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            out.writelines(_line(r) for r in unclaimed)
        result.unclaimed_path = str(path)
    return result


def _import_group(manager: MemoryManager, scope: str, target: str, group: _Group, result: ImportResult,
                  dry_run: bool) -> None:
    """One (scope, target): the archive records the home lacks, then the current entries it lacks, in one write
    of the storage (both backends), the texts judged by the custody policy first."""
    from .builtin.archive import ArchiveState, Record
    from .builtin.provider import FILE_NAMES
    from .builtin.store import ENTRY_DELIMITER
    from .builtin.tools import Operation
    from .security.policy import Verdict

    builtin = manager.builtin
    name = f"{target}{'@' + scope if scope else ''}"
    state = builtin.file(target, scope).read()
    if state.corrupt:
        result.refused.append(f"{name}: {state.corrupt}; fix or delete the file, then import again")
        return
    if not builtin.enabled[target]:
        key = "memory_enabled" if target == "memory" else "user_profile_enabled"
        result.refused.append(f"{name}: {len(group.entries)} entries and {len(group.log)} archive records not "
                              f"imported: writes to {FILE_NAMES[target]} are disabled (memory.{key}: false); "
                              "enable it, then import again")
        return
    policy = dataclasses.replace(builtin.policy, write_approval=False)  # the user imports: nothing is the agent's
    provenance: dict[str, Provenance | None] = {}
    for record in group.entries:
        provenance.setdefault(record["text"], _provenance(record))
    verdicts: dict[str, Verdict] = {}

    def judge(text: str) -> Verdict:
        if text not in verdicts:
            prov = provenance.get(text) or Provenance(Origin.IMPORT, "ironmem import")
            decision = policy.decide_write(text, prov)
            verdicts[text] = decision.verdict
            if decision.verdict is Verdict.REFUSE:
                result.refused.append(f"{name} entry {text[:60]!r}: {decision.reason}")
        return verdicts[text]

    def same(record: Record) -> str:  # a record is present when all of it is (not only its id)
        return json.dumps(record.to_json(), sort_keys=True)

    have = {same(r) for r in builtin.archive_records(target, scope)}
    log: list[Record] = []
    for logged in group.log:
        if same(logged) in have:
            result.history_present += 1
        elif judge(logged.text) is not Verdict.REFUSE:
            have.add(same(logged))
            log.append(logged)
    folded = builtin.archive_state(target, scope)
    known = ArchiveState({k: dataclasses.replace(v) for k, v in folded.info.items()}, dict(folded.archived),
                         list(folded.superseded))
    known.apply(log)
    now = time.time()
    live = set(state.entries)
    superseded_before = {r.text for r in folded.superseded}
    superseded_known = {r.text for r in known.superseded}
    add: dict[str, None] = {}  # ordered, and linear to look up
    made: list[Record] = []  # records a file written by another tool lacks (from its entries' dates)
    held: list[tuple[str, Provenance]] = []
    for record in group.entries:
        text, status = record["text"], record.get("status", "current")
        if status == "current":
            if text in live or text in add:
                result.present += 1
                continue
            verdict = judge(text)
            if verdict is Verdict.HOLD:
                held.append((text, provenance[text] or Provenance(Origin.IMPORT)))
            elif verdict is not Verdict.REFUSE:
                add[text] = None
                if known.written_at(text) is None and record.get("created_at") is not None:
                    made.append(Record("written", text, float(record["created_at"])))
            continue
        archived = status == "archived"
        if (text in folded.archived and text not in live) if archived else text in superseded_before:
            result.present += 1
            continue
        if not ((text in known.archived) if archived else text in superseded_known):
            if judge(text) is Verdict.REFUSE:
                continue
            made.append(Record("archived", text, _number(record, "archived_at") or now,
                               since=_number(record, "created_at"), reason="imported as archived") if archived else
                        Record("superseded", text, _number(record, "valid_to") or now,
                               since=_number(record, "valid_from"), by=record.get("replaced_by"), how="replace"))
            known.apply(made[-1:])
            superseded_known.add(text)
        result.added += 1
        result.new_entries.append(f"{name} ({status}): {text}")
    limit, file_name, overflow_mode = builtin.limits[target], FILE_NAMES[target], builtin.overflow
    plan: dict[str, Any] = {}

    def change(current: dict[str, Any]) -> dict[str, list[str]]:  # may run twice (a retried connection): pure
        entries = list(current[target].entries)
        there, chars = set(entries), len(ENTRY_DELIMITER.join(entries))
        overflow: list[str] = []
        for text in add:
            if text in there:
                continue
            grown = chars + len(text) + (len(ENTRY_DELIMITER) if entries else 0)
            if grown <= limit:
                entries.append(text)
                there.add(text)
                chars = grown
            else:
                overflow.append(text)
        plan.update(entries=entries, overflow=overflow)
        return {target: entries}

    def archive() -> dict[str, list[Record]]:
        moved = [] if overflow_mode == "refuse" else [
            Record("archived", text, now, since=known.written_at(text),
                   reason=f"imported into a full {file_name} ({limit:,} chars)") for text in plan["overflow"]]
        return {target: [*log, *made, *moved]}

    change({target: state})  # the plan as things are now (a dry run's answer)
    if not dry_run:
        if log or made or add:
            if scope and builtin._db is None:
                builtin._ensure_scope(scope)  # the folder's marker, so `known_scopes` (and export) lists it
            builtin.storage.transact_scoped({target: scope}, change, archive=archive, record=[
                {"action": "import", "target": target, "scope": scope, "entries": len(add)}])
            builtin.state(target, scope)  # the search index follows the new entries
        for text, prov in held:
            builtin.stage([Operation("add", target, text)], scopes={target: scope}, batch=False, provenance=prov,
                          key=f"import:{scope}:{target}:{text_key(text)}")
        recorded: dict[str, list[str]] = {}
        kept = set(add) - (set(plan["overflow"]) if overflow_mode == "refuse" else set())
        for text in sorted({*kept, *(r.text for r in log), *(r.text for r in made)}):
            known_prov = provenance.get(text)
            if known_prov is not None:
                recorded.setdefault(json.dumps(known_prov.to_dict(), sort_keys=True), []).append(text)
        for data, texts in recorded.items():
            builtin.custody.record_entries(scope, target, texts, Provenance.from_dict(json.loads(data)))
    overflow = plan["overflow"]
    result.history_added += len(log)
    result.added += len(add) - len(overflow)
    result.held += len(held)
    gone = set(overflow)
    result.new_entries += [f"{name}: {t}" for t in add if t not in gone]
    result.new_entries += [f"{name} (held for approval): {t}" for t, _ in held]
    if overflow and overflow_mode == "refuse":  # Hermes's setting: what does not fit is refused, never moved
        result.refused += [f"{name} entry {t[:60]!r}: {file_name} is full ({limit:,} chars) and overflow is "
                           "'refuse'; raise its limit in config.yaml or make room, then import again"
                           for t in overflow]
    elif overflow:
        result.archived += len(overflow)
        result.notes.append(f"{len(overflow)} {name} entr{'y' if len(overflow) == 1 else 'ies'} did not fit "
                            f"{file_name} ({limit:,} chars) and went to its archive (session_search finds them; "
                            "`ironmem archive restore` puts one back)")


def _import_turns(manager: MemoryManager, turns: list[tuple[TurnKey, Provenance | None]], result: ImportResult,
                  dry_run: bool) -> None:
    if not turns:
        return
    index = manager.builtin.index
    stored = Counter(getattr(index, "all_turns", list)())
    new: list[tuple[TurnKey, Provenance | None]] = []
    for key, prov in turns:
        if stored[key]:
            stored[key] -= 1
            result.turns_present += 1
        else:
            new.append((key, prov))
    result.turns_added += len(new)
    if dry_run:
        return
    batch: list[TurnKey] = []
    for key, prov in new:  # clean turns in bulk; a turn with provenance alone (custody keys it by its new id)
        if prov is None:
            batch.append(key)
            continue
        if batch:
            index.add_turns(batch)
            batch = []
        session_id, user_id, ts, user, assistant = key
        turn_id = index.add_turn(session_id, user, assistant, user_id=user_id, ts=ts)
        manager.builtin.custody.record_turn(turn_id, prov)
    if batch:
        index.add_turns(batch)


def _import_pending(manager: MemoryManager, pending: list[Any], result: ImportResult, dry_run: bool) -> None:
    custody = manager.builtin.custody
    for held in pending:
        if custody.get(held.id) is not None:
            result.pending_present += 1
            continue
        result.pending_added += 1
        if not dry_run:
            custody.stage(held)


def _import_items(manager: MemoryManager, items: list[dict[str, Any]], result: ImportResult, dry_run: bool) -> None:
    if not items:
        return
    table = _item_table(manager, create=not dry_run)
    try:
        for record in items:
            namespace, key, value = tuple(record.get("namespace") or ()), record.get("key"), record.get("value")
            if not namespace or not isinstance(key, str) or not isinstance(value, dict):
                result.refused.append(f"store item {record!r:.80}: needs a namespace, a string key and a dict value")
                continue
            found = table.get(namespace, key) if table is not None else None
            if found is not None and found.value == value:
                result.items_present += 1
                continue
            result.items_added += 1
            if not dry_run:
                table.put(namespace, key, value, created_at=record.get("created_at"),
                          updated_at=record.get("updated_at"))
    finally:
        if table is not None:
            table.close()
