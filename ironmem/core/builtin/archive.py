"""Capacity and time: the archive beside each memory file, merge-first writes, superseded versions.

A full ``MEMORY.md`` or ``USER.md`` never refuses a fact silently. Three mechanisms, all deterministic (no model
call), decided under the write lock so both storage backends behave the same:

- **Archive tier.** When a write would take a file past its character limit, whole entries move out of the
  file into its archive until the write fits, chosen by :func:`archive_order`: the least recalled first, and
  among those the oldest; never an entry written in the current session, never one the write itself touches.
  An archived entry is still searched by ``session_search`` and recalled by prefetch, and ``ironmem archive
  restore`` puts it back. The tool result names what moved. ``overflow="refuse"`` keeps Hermes's behaviour
  instead (the write is refused and the model is asked to consolidate).
- **Merge first.** An ``add`` that nearly duplicates an existing entry updates that entry instead of adding a
  second one (:func:`near_duplicate`: the same words once case, punctuation and word endings are folded, or one
  entry's words all within the other's, which adds at most as many again). The result says so.
- **Supersession.** A ``replace`` (and a merge) keeps the old text as a *superseded* version with its validity
  interval: from when it was written to when it was replaced. Recall prefers current facts; a superseded one
  is shown, marked and dated, only to a question about the past (:func:`asks_about_past`).

The archive log (format ``ironmem-archive``, version 1)
-------------------------------------------------------
One append-only JSON Lines file per memory file, beside it: ``MEMORY.archive.jsonl`` next to ``MEMORY.md``
(``USER.archive.jsonl`` next to ``USER.md``), private to its owner (``0600``). On PostgreSQL the same records
are rows of the ``archive`` table, written in the transaction that changes the entries. The first line of a
file is a header ``{"format": "ironmem-archive", "version": 1, "file": "MEMORY.md"}``; every other line is one
record (keys with no value are left out):

====================  ==========================================================================================
``event``             ``written`` (an entry entered the file), ``archived`` (moved out because the file was
                      full), ``superseded`` (replaced or merged; ``how`` says which), ``restored`` (moved back in),
                      ``recalled`` (``n`` more recalls of the entry, counted since the previous write)
``id``                a short stable id (12 hex digits) of the record
``text``              the entry's text
``at``                when the event happened (Unix seconds, UTC)
``since``             for ``archived`` / ``superseded``: when the text was first written (the start of its
                      validity); absent when unknown (written by hand or by Hermes)
``by``                for ``superseded``: the text that replaced it
``how``               for ``superseded``: ``replace`` or ``merge``
``reason``            for ``archived``: why it moved (the limit, the usage, the rule)
``recalls``           for ``archived``: how often it had been recalled
``session``           the session that caused the event
``ref``               for ``restored``: the id of the ``archived`` record
``n``                 for ``recalled``: how many recalls
``provenance``        optional, an opaque JSON object the custody layer attaches (kept through every move)
====================  ==========================================================================================

Readers ignore keys they do not know and lines that do not parse (a torn last line after a crash), so later
versions can add keys. The log is written BEFORE the memory file under the same lock: a crash in between
leaves a record whose entry is still in the file, which :class:`ArchiveState` treats as live (nothing is lost
either way). Hermes never reads these files: it keeps reading and writing ``MEMORY.md`` and ``USER.md``, which
simply no longer hold the moved entries.

Example:
    >>> state = ArchiveState()
    >>> state.apply([Record("written", "likes tea", at=1.0, session="s1")])
    >>> near_duplicate("User likes tea.", "user likes TEA")
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import MemoryFileError
from .private import make_private_dirs
from .ranking import tokens

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_VERSION",
    "OVERFLOW_MODES",
    "ArchiveFile",
    "ArchiveState",
    "Record",
    "archive_order",
    "asks_about_past",
    "asks_about_present",
    "covers",
    "near_duplicate",
    "usage_warning",
]

ARCHIVE_FORMAT = "ironmem-archive"
ARCHIVE_VERSION = 1
OVERFLOW_MODES = ("archive", "refuse")
#: A soft warning goes into the tool result once a file is this full after a write.
WARN_AT = 0.8
_DELIMITER_CHARS = 3  # len("\n§\n")


def _now() -> float:
    return time.time()


@dataclass(frozen=True)
class Record:
    """One record of the archive log (see the module docstring for the keys)."""

    event: str
    text: str
    at: float
    since: float | None = None
    by: str | None = None
    how: str | None = None
    reason: str | None = None
    recalls: int | None = None
    session: str | None = None
    ref: str | None = None
    n: int | None = None
    provenance: dict[str, Any] | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            digest = hashlib.sha256(f"{self.event}\x1f{self.text}\x1f{self.at!r}".encode()).hexdigest()[:12]
            object.__setattr__(self, "id", digest)

    def to_json(self) -> dict[str, Any]:
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record | None:
        """A record from a parsed line; None when it is not one (unknown keys are ignored)."""
        try:
            event, text, at = str(data["event"]), str(data["text"]), float(data["at"])
        except (KeyError, TypeError, ValueError):
            return None
        known = {f.name for f in fields(cls)} - {"event", "text", "at"}
        extra = {k: v for k, v in data.items() if k in known}
        try:
            return cls(event, text, at, **extra)
        except TypeError:
            return None


@dataclass
class EntryInfo:
    """What the log knows about one entry text."""

    written: float | None = None
    session: str | None = None
    recalls: int = 0
    provenance: dict[str, Any] | None = None


@dataclass
class ArchiveState:
    """The log folded: per text, when it was written and how often recalled; the archived and superseded
    versions (newest last). ``apply`` folds more records in (the log is append-only, so a reader folds only
    what was appended since it last looked)."""

    info: dict[str, EntryInfo] = field(default_factory=dict)
    archived: dict[str, Record] = field(default_factory=dict)  # text -> its latest "archived" record
    superseded: list[Record] = field(default_factory=list)
    records: int = 0

    def apply(self, records: Iterable[Record]) -> None:
        for record in records:
            self.records += 1
            info = self.info.setdefault(record.text, EntryInfo())
            if record.provenance is not None:
                info.provenance = record.provenance
            if record.event == "written":
                info.written = record.at
                info.session = record.session
            elif record.event == "recalled":
                info.recalls += int(record.n or 1)
            elif record.event == "archived":
                self.archived[record.text] = record
            elif record.event == "restored":  # back in the file: it counts as written now (so it stays a while)
                self.archived.pop(record.text, None)
                info.written = record.at
                info.session = record.session
            elif record.event == "superseded":  # an archived version that is replaced is no longer current
                self.superseded.append(record)
                self.archived.pop(record.text, None)

    def with_recalls(self, counts: Mapping[str, int]) -> ArchiveState:
        """A copy that also counts ``counts`` (recalls not logged yet); this state is left as it is."""
        if not counts:
            return self
        info = dict(self.info)
        for text, n in counts.items():
            found = info.get(text) or EntryInfo()
            info[text] = EntryInfo(found.written, found.session, found.recalls + n, found.provenance)
        return ArchiveState(info, self.archived, self.superseded, self.records)

    def archived_now(self, live: Iterable[str] = ()) -> list[Record]:
        """The archived entries, oldest move first, without any that is back in the file (restored, re-added,
        or a move a crash interrupted before the file was written)."""
        live_set = set(live)
        return sorted((r for t, r in self.archived.items() if t not in live_set), key=lambda r: r.at)

    def superseded_now(self, live: Iterable[str] = ()) -> list[Record]:
        """The superseded versions whose text is not current again."""
        live_set = set(live)
        return [r for r in self.superseded if r.text not in live_set]

    def written_at(self, text: str) -> float | None:
        found = self.info.get(text)
        return found.written if found else None


# --------------------------------------------------------------------------------------------------
# Similarity and the order of moves
# --------------------------------------------------------------------------------------------------
_WORDS = re.compile(r"[^\W_]+")
#: An entry must hold at least this many distinct words before a longer one can absorb it (a one-word note such
#: as "test" is a different fact from a sentence that happens to use the word).
MERGE_MIN_WORDS = 3


def _words(text: str) -> tuple[str, ...]:
    return tuple(tokens(text)) or tuple(w.lower() for w in _WORDS.findall(text))


def _within(small: tuple[str, ...], large: tuple[str, ...]) -> bool:
    """Whether ``small`` is a subsequence of ``large`` (its words, in its order, with others in between)."""
    rest = iter(large)
    return all(word in rest for word in small)


def near_duplicate(old: str, new: str) -> bool:
    """Whether ``new`` nearly duplicates ``old``: the same words in the same order once case, punctuation and word
    endings are folded (``ranking.tokens``: Snowball stems), or the words of one all within the other's, in order,
    when the shorter has at least ``MERGE_MIN_WORDS`` distinct words and the longer adds at most as many again.

    Deterministic, linear in the texts. Two facts that differ in one word ("server A" / "server B") or in the
    order of their words ("fact 3-4" / "fact 4-3") are not near-duplicates.

    Example:
        >>> near_duplicate("User prefers dark mode", "User prefers dark mode in every editor")
        True
        >>> near_duplicate("server A runs nginx", "server B runs nginx")
        False
    """
    a, b = _words(old), _words(new)
    if not a or not b:
        return False
    if a == b:
        return True
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return len(set(small)) >= MERGE_MIN_WORDS and len(large) <= 2 * len(small) and _within(small, large)


def covers(existing: str, new: str) -> bool:
    """Whether ``existing`` already says all ``new`` says, and more: ``new``'s words are within its words, in
    order, and it has more (a near-duplicate add then leaves the entry as it is; otherwise the new wording
    replaces it)."""
    a, b = _words(existing), _words(new)
    return len(b) < len(a) and _within(b, a)


def archive_order(entries: Sequence[str], state: ArchiveState) -> list[int]:
    """Positions of ``entries`` in the order they move to the archive: the least recalled first, then the
    oldest (an entry with no known write time, written by hand or by Hermes, counts as the oldest), then the
    one nearer the top of the file."""

    def key(i: int) -> tuple[int, float, int]:
        info = state.info.get(entries[i])
        return (info.recalls if info else 0, (info.written or 0.0) if info else 0.0, i)

    return sorted(range(len(entries)), key=key)


#: Words that make a question about the past: a superseded fact answers it, so recall may show one.
_PAST = frozenset(
    "before previously previous formerly former earlier used originally original prior past old older "
    "ago until history changed change last initially first".split()
)
_PAST_PHRASES = ("used to", "at first", "back then", "in the past", "no longer", "any more", "anymore")


def asks_about_past(query: str) -> bool:
    """Whether ``query`` asks about an earlier state of things ("where did I live before?", "what was my old
    phone?"): the one case where recall shows a superseded fact.

    Example:
        >>> asks_about_past("which phone did I use before?"), asks_about_past("which phone do I use?")
        (True, False)
    """
    lowered = query.lower()
    if any(p in lowered for p in _PAST_PHRASES):
        return True
    return any(w in _PAST for w in _WORDS.findall(lowered))


_PRESENT = frozenset("now currently current nowadays lately today still presently".split())
_PRESENT_PHRASES = ("these days", "at the moment", "right now", "any more", "anymore", "at present")


def asks_about_present(query: str) -> bool:
    """Whether ``query`` asks how things are NOW ("which phone do I use now?", "who is my manager these
    days?"): recall then prefers the latest of two turns about the same thing. A question that also asks about
    the past (:func:`asks_about_past`) does not count.

    Example:
        >>> asks_about_present("where do I live now?"), asks_about_present("where did I live before?")
        (True, False)
    """
    lowered = query.lower()
    if asks_about_past(query):
        return False
    if any(p in lowered for p in _PRESENT_PHRASES):
        return True
    return any(w in _PRESENT for w in _WORDS.findall(lowered))


def usage_warning(used: int, limit: int, name: str, overflow: str) -> str | None:
    """A soft warning for the tool result once ``name`` is ``WARN_AT`` full (None below that)."""
    if limit <= 0 or used < WARN_AT * limit:
        return None
    pct = min(100, used * 100 // limit)
    if overflow == "archive":
        return (f"{name} is {pct}% full. When a write does not fit, its least recalled, oldest entries move to the "
                "archive (still found by session_search); merge or shorten entries to keep them in view")
    return (f"{name} is {pct}% full. A write that does not fit will be refused: consolidate soon (replace "
            "overlapping entries with one shorter entry, remove stale ones)")


# --------------------------------------------------------------------------------------------------
# The plan of one write
# --------------------------------------------------------------------------------------------------
def _chars(entries: Sequence[str]) -> int:
    return sum(len(e) for e in entries) + _DELIMITER_CHARS * max(0, len(entries) - 1)


def make_room(
    entries: list[str], before: Sequence[str], limit: int, state: ArchiveState, *, protected: set[str],
    name: str, session: str | None, now: float,
) -> tuple[list[str], list[Record]] | None:
    """Move entries to the archive (in :func:`archive_order`, skipping ``protected`` ones) until ``entries`` fit
    ``limit``. Returns the kept entries and the ``archived`` records, or None when even moving every entry that
    may move is not enough."""
    used = _chars(entries)
    if used <= limit:
        return entries, []
    order = [i for i in archive_order(entries, state) if entries[i] not in protected]
    gone: set[int] = set()
    for i in order:
        if _chars([e for j, e in enumerate(entries) if j not in gone]) <= limit:
            break
        gone.add(i)
    kept = [e for i, e in enumerate(entries) if i not in gone]
    if _chars(kept) > limit:
        return None
    reason = (f"{name} was full ({_chars(before):,} of {limit:,} chars) and a write needed "
              f"{used - _chars(before):+,} chars; moved as the least recalled, oldest entry")
    records = []
    for i in sorted(gone):
        info = state.info.get(entries[i])
        records.append(Record("archived", entries[i], now, since=info.written if info else None, reason=reason,
                              recalls=info.recalls if info else 0, session=session,
                              provenance=info.provenance if info else None))
    return kept, records


def written_this_session(entries: Iterable[str], state: ArchiveState, session: str | None,
                         started: float | None) -> set[str]:
    """The entries written in the current session (never archived by it)."""
    out: set[str] = set()
    for text in entries:
        info = state.info.get(text)
        if info is None or info.written is None:
            continue
        if (session is not None and info.session == session) or (started is not None and info.written >= started):
            out.add(text)
    return out


# --------------------------------------------------------------------------------------------------
# The log on disk (the file backend; PostgreSQL keeps the same records in a table)
# --------------------------------------------------------------------------------------------------
_CACHE_LOCK = threading.Lock()


class ArchiveFile:
    """The archive log of one memory file: ``MEMORY.archive.jsonl`` beside ``MEMORY.md``.

    :meth:`append` is called only under the memory file's lock; :meth:`state` folds the log incrementally
    (only the bytes appended since the last call are read).

    Example:
        >>> import tempfile, pathlib
        >>> log = ArchiveFile(pathlib.Path(tempfile.mkdtemp()) / "MEMORY.md")
        >>> log.append([Record("written", "likes tea", 1.0)])
        >>> log.state().written_at("likes tea")
        1.0
    """

    def __init__(self, memory_path: Path) -> None:
        memory_path = Path(memory_path)
        self.path = memory_path.with_name(f"{memory_path.stem}.archive.jsonl")
        self.file_name = memory_path.name
        self.memory_path = memory_path
        self._state = ArchiveState()
        self._offset = 0
        self._ident: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def state(self) -> ArchiveState:
        """The folded log as it is on disk now (an empty state when there is no log)."""
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                self._state, self._offset, self._ident = ArchiveState(), 0, None
                return self._state
            ident = (stat.st_ino, stat.st_dev)
            if ident != self._ident or stat.st_size < self._offset:
                self._state, self._offset, self._ident = ArchiveState(), 0, ident
            if stat.st_size > self._offset:
                with open(self.path, "rb") as handle:
                    handle.seek(self._offset)
                    chunk = handle.read(stat.st_size - self._offset)
                end = chunk.rfind(b"\n")
                if end >= 0:  # only whole lines: a torn last line is read once it is completed (or never)
                    self._state.apply(_parse(chunk[: end + 1]))
                    self._offset += end + 1
            return self._state

    def append(self, records: Sequence[Record]) -> None:
        """Append ``records`` durably (fsync). Call only while holding the memory file's lock."""
        if not records:
            return
        try:
            self._append(records)
        except OSError as exc:
            raise MemoryFileError(
                f"could not write {self.memory_path}: its archive log {self.path.name} could not be written "
                f"({exc.strerror or exc}). The previous file is intact; nothing was written. Free disk space or "
                "make the folder writable, then retry."
            ) from exc

    def _append(self, records: Sequence[Record]) -> None:
        make_private_dirs(self.path.parent)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            size = os.fstat(fd).st_size
            lines: list[str] = []
            if size == 0:
                lines.append(json.dumps({"format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION,
                                         "file": self.file_name}))
            else:
                with open(self.path, "rb") as handle:  # a torn last line (a crash) is closed first
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":
                        lines.insert(0, "")
            lines.extend(json.dumps(r.to_json(), ensure_ascii=False) for r in records)
            os.write(fd, ("\n".join(lines) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def all_records(self) -> list[Record]:
        """Every record in the log, in order (for ``ironmem archive``)."""
        try:
            return list(_parse(self.path.read_bytes()))
        except FileNotFoundError:
            return []


def _parse(data: bytes) -> Iterable[Record]:
    for line in data.splitlines():
        if not line.strip():
            continue
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict) and "event" in parsed:
                record = Record.from_json(parsed)
                if record is not None:
                    yield record
