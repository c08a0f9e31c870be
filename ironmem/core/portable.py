"""Export and import: one versioned JSONL format for everything a memory home holds (``ironmem export/import``).

Format ``ironmem`` version 1: UTF-8 JSON Lines, one record per line, keys sorted, so two exports of the same
memory are the same bytes. The first line is the header; every other record has a ``kind``:

``{"format": "ironmem", "kind": "header", "version": 1}``
    Always first. An importer refuses a higher ``version`` with what to do.
``{"kind": "setting", "key": "memory_char_limit", "value": 2200}``
    The manager's settings (limits, per-user notes, tool and recall budgets). Import does not change settings
    (they live in ``config.yaml`` or in code); it reports the ones that differ.
``{"kind": "entry", "target": "memory", "user_id": null, "text": "...", "status": "current"}``
    One entry of ``MEMORY.md`` (``target: memory``) or ``USER.md`` (``user``), in file order, for the shared files
    (``user_id: null``) and every user's own. Optional fields, present when the memory records them:
    ``provenance`` (origin, session, user, time, untrusted inputs), ``created_at`` / ``valid_from`` /
    ``valid_to`` (ISO 8601), and ``status`` ``archived`` or ``superseded`` for entries moved out of the file.
``{"kind": "turn", "session_id": "s1", "user_id": "ada", "ts": 1733390000.0, "user": "...", "assistant": "..."}``
    Every synced turn, in stored order (``provenance`` optional).
``{"kind": "store_item", "namespace": ["docs"], "key": "k", "value": {...}, "created_at": ..., "updated_at": ...}``
    Items of the LangGraph store over this memory (:mod:`ironmem.core.items`).

Extension point: any record may carry ``"x": {"<name>": {...}}`` (carried through untouched), and a module can
:func:`register_extension` to export records of its own kinds (or entry statuses) and import them. A record no
extension claims is never dropped: import keeps it in ``<home>/.ironmem/import-unclaimed.jsonl`` and says so.

Import sources: this format, a Hermes memory folder (``MEMORY.md`` / ``USER.md`` with ``§`` separators, or a
Hermes root with ``memories/``), and the items of a LangGraph store (the LangChain adapter turns a store into
``store_item`` records: ``ironmem.adapters.langchain.store.store_records``). Entries go through the memory's own
write path (the security scan, the limits); what is refused is listed, with the reason, and the rest imports.

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

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from .errors import ConfigError, IronMemError, MemoryFileError, OperationError

if TYPE_CHECKING:  # pragma: no cover
    from .manager import MemoryManager

__all__ = [
    "FORMAT",
    "VERSION",
    "Extension",
    "ImportResult",
    "export_memory",
    "export_records",
    "hermes_records",
    "import_records",
    "read_records",
    "register_extension",
]

FORMAT = "ironmem"
VERSION = 1
TARGETS = ("memory", "user")
#: The settings an export records (attributes of the manager or of its built-in provider).
SETTINGS = ("memory_char_limit", "user_char_limit", "memory_per_user", "tool_budget", "prefetch_timeout")


@dataclass(frozen=True)
class Extension:
    """Records a module adds to the format: ``export(manager)`` yields them; ``import_(manager, record)`` stores
    one (returns a short note, or raises :class:`IronMemError` to refuse it). ``claims`` are the record kinds it
    handles; an entry with another status than ``current`` is claimed as ``entry:<status>``."""

    name: str
    claims: tuple[str, ...]
    export: Callable[[MemoryManager], Iterable[dict[str, Any]]]
    import_: Callable[[MemoryManager, dict[str, Any]], str | None]
    #: Optional fields for each current entry (provenance, dates): ``(manager, scope, target, text) -> dict``.
    entry_fields: Callable[[MemoryManager, str, str, str], dict[str, Any]] | None = None


_EXTENSIONS: dict[str, Extension] = {}


def register_extension(extension: Extension) -> None:
    """Add (or replace, by name) an :class:`Extension`."""
    _EXTENSIONS[extension.name] = extension


def _claimant(record: dict[str, Any]) -> Extension | None:
    kind = record.get("kind")
    if kind == "entry" and record.get("status", "current") != "current":
        kind = f"entry:{record['status']}"
    return next((e for e in _EXTENSIONS.values() if kind in e.claims), None)


# --------------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------------
def _settings(manager: MemoryManager) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in SETTINGS:
        if key.endswith("_char_limit"):
            out[key] = manager.builtin.limits["memory" if key.startswith("memory") else "user"]
        else:
            out[key] = getattr(manager, key, None)
    return out


def _scopes(manager: MemoryManager) -> list[str]:
    return ["", *sorted(manager.builtin.known_scopes())]


def export_records(manager: MemoryManager) -> Iterator[dict[str, Any]]:
    """Every record of ``manager``'s memory, header first, in the format's fixed order."""
    yield {"format": FORMAT, "kind": "header", "version": VERSION}
    for key, value in sorted(_settings(manager).items()):
        yield {"kind": "setting", "key": key, "value": value}
    field_makers = [e.entry_fields for e in _EXTENSIONS.values() if e.entry_fields is not None]
    for scope in _scopes(manager):
        for target in TARGETS:
            state = manager.builtin.file(target, scope).read()
            if state.corrupt:
                raise MemoryFileError(f"{state.corrupt}; fix or delete the file, then export again (nothing was "
                                      "exported)")
            for text in state.entries:
                record: dict[str, Any] = {"kind": "entry", "target": target, "user_id": scope or None,
                                          "text": text, "status": "current"}
                for make in field_makers:
                    record.update(make(manager, scope, target, text))
                yield record
    all_turns = getattr(manager.builtin.index, "all_turns", None)
    if all_turns is None:
        raise ConfigError("this storage cannot list its turns for export; export needs files + SQLite or PostgreSQL")
    for session_id, user_id, ts, user, assistant in all_turns():
        yield {"kind": "turn", "session_id": session_id, "user_id": user_id, "ts": ts, "user": user,
               "assistant": assistant}
    table = _item_table(manager, create=False)
    if table is not None:
        try:
            for item in table.items():
                yield {"kind": "store_item", "namespace": list(item.namespace), "key": item.key,
                       "value": item.value, "created_at": item.created_at, "updated_at": item.updated_at}
        finally:
            table.close()
    for extension in _EXTENSIONS.values():
        yield from extension.export(manager)


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
    yield {"format": FORMAT, "kind": "header", "version": VERSION}
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
# Import
# --------------------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    """What an import did (or, with ``dry_run``, would do)."""

    dry_run: bool = False
    added: int = 0
    present: int = 0
    turns_added: int = 0
    turns_present: int = 0
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
            "dry_run": self.dry_run, "entries": {"added": self.added, "present": self.present},
            "turns": {"added": self.turns_added, "present": self.turns_present},
            "store_items": {"added": self.items_added, "present": self.items_present},
            "refused": self.refused,
            "settings_differ": {k: {"file": a, "here": b} for k, (a, b) in self.settings_differ.items()},
            "unclaimed": dict(self.unclaimed), "unclaimed_path": self.unclaimed_path,
            "new_entries": self.new_entries, "notes": self.notes,
        }


def _entry_target(record: dict[str, Any]) -> tuple[str, str, str]:
    target, text = record.get("target"), record.get("text")
    if target not in TARGETS or not isinstance(text, str) or not text.strip():
        raise ConfigError(f"an entry record needs target memory|user and a non-empty text, got {record!r:.120}")
    user_id = record.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise ConfigError(f"an entry's user_id is a string or null, got {user_id!r}")
    return target, user_id or "", text


def import_records(manager: MemoryManager, records: Iterable[dict[str, Any]], *,
                   dry_run: bool = False) -> ImportResult:
    """Add ``records`` to ``manager``'s memory: entries not already there (in order, through the security scan
    and the limits), turns not already stored, store items, extension records. ``dry_run`` changes nothing and
    reports the difference. A record that cannot be stored is listed in ``refused``; nothing else is lost."""
    from .builtin.tools import Operation
    from .items import entry_namespace
    from .security import scan

    result = ImportResult(dry_run=dry_run)
    here = _settings(manager)
    turns: list[tuple[str, str | None, float, str, str]] = []
    items: list[dict[str, Any]] = []
    unclaimed: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], set[str]] = {}
    for record in records:
        kind = record.get("kind")
        if kind == "header":
            continue
        if kind == "setting":
            key = record.get("key")
            if key in here and here[key] != record.get("value"):
                result.settings_differ[str(key)] = (record.get("value"), here[key])
            continue
        claimant = _claimant(record)
        if claimant is not None:
            if not dry_run:
                try:
                    note = claimant.import_(manager, record)
                except IronMemError as exc:
                    result.refused.append(f"{kind}: {exc}")
                else:
                    if note:
                        result.notes.append(note)
            continue
        if kind == "entry" and record.get("status", "current") == "current":
            target, scope, text = _entry_target(record)
            key = (scope, target)
            if key not in seen:
                seen[key] = set(manager.builtin.file(target, scope).read().entries)
            if text in seen[key]:
                result.present += 1
                continue
            if dry_run:
                verdict = scan(text)
                if verdict.blocked:
                    result.refused.append(f"{target} entry {text[:60]!r}: the security scan blocks it "
                                          f"({verdict.reason})")
                    continue
            else:
                try:
                    manager.builtin.apply([Operation("add", target, content=text)], scopes={target: scope})
                except (OperationError, MemoryFileError) as exc:
                    result.refused.append(f"{target} entry {text[:60]!r}: {exc}")
                    continue
            seen[key].add(text)
            result.added += 1
            result.new_entries.append(f"{target}{'@' + scope if scope else ''}: {text}")
        elif kind == "turn":
            try:
                turns.append((str(record["session_id"]), record.get("user_id"), float(record["ts"]),
                              str(record["user"]), str(record["assistant"])))
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"a turn record needs session_id, ts, user and assistant, got {record!r:.120}") \
                    from None
        elif kind == "store_item":
            items.append(record)
            mapped = entry_namespace(record.get("namespace") or ())
            if mapped is not None:  # a memory namespace: its text is an entry too (a no-op when already there)
                from .items import item_text

                target, user = mapped
                scope = manager.scopes_for(user, memory_per_user=True)[target]  # a user's namespace: their own file
                entry = {"kind": "entry", "target": target, "user_id": scope or None,
                         "text": item_text(record.get("value"))}
                sub = import_records(manager, [entry], dry_run=dry_run)
                result.added += sub.added
                result.refused += sub.refused
                result.new_entries += sub.new_entries
                if sub.added:
                    seen.pop((scope, target), None)
        else:
            unclaimed.append(record)
            result.unclaimed[str(kind if kind != "entry" else f"entry:{record.get('status')}")] += 1
    _import_turns(manager, turns, result, dry_run)
    _import_items(manager, items, result, dry_run)
    if unclaimed and not dry_run:
        path = manager.home / ".ironmem" / "import-unclaimed.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            out.writelines(_line(r) for r in unclaimed)
        result.unclaimed_path = str(path)
    return result


def _import_turns(manager: MemoryManager, turns: list[tuple[str, str | None, float, str, str]],
                  result: ImportResult, dry_run: bool) -> None:
    if not turns:
        return
    stored = set(getattr(manager.builtin.index, "all_turns", list)())
    new = [t for t in turns if t not in stored]
    result.turns_present += len(turns) - len(new)
    result.turns_added += len(new)
    if new and not dry_run:
        if manager.builtin.read_only:
            from .errors import ReadOnlyError

            raise ReadOnlyError("the memory was opened read-only; nothing was imported")
        manager.builtin.index.add_turns(new)


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
