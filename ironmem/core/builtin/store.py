"""One memory file (MEMORY.md or USER.md) in the Hermes format, written safely.

Entries are separated by a line holding only ``§``. Reading accepts ``\\n``, ``\\r\\n`` and ``\\r`` line endings
and a UTF-8 byte-order mark; writing keeps the file's own line endings (a BOM is dropped, as Hermes does).
Duplicate entries are read once (Hermes de-duplicates on load).

Every change takes the lock Hermes takes (``fcntl.flock`` on ``<file>.lock`` next to the file, so a Hermes
process and ironmem exclude each other), re-reads the file under the lock (so a concurrent writer or a hand
edit is never lost), writes a temp file, fsyncs it and swaps it in with ``os.replace``. A file that does not
parse is backed up and left untouched.

Hand edits: ironmem remembers the entries it last wrote (``.ironmem/<file>.known``). Text a person or a shell
appended to an entry without a ``§`` line is split off and kept as its own entry on the next write, and a
unique ``<file>.bak.<timestamp>`` copy of the file is saved first. Without that record (a folder ironmem never
wrote), an entry longer than the whole file's limit is treated like Hermes's drift guard does: replacing or
removing it is refused, with a ``.bak`` copy and the way to fix it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import MemoryFileError, ReadOnlyError
from ..fileio import TMP_PREFIX
from .private import make_private_dirs, write_private

__all__ = [
    "ENTRY_DELIMITER",
    "FileState",
    "MemoryFile",
    "dedupe",
    "detect_newline",
    "entries_with_lines",
    "format_usage",
    "parse_entries",
    "render_entries",
]

log = logging.getLogger(__name__)

ENTRY_DELIMITER = "\n§\n"
_TMP_PREFIX = TMP_PREFIX
_BOM = "\ufeff"
LOCK_TIMEOUT_S = 30.0
#: How often a waiting writer retries the lock.
LOCK_POLL_S = 0.002


def normalize_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def detect_newline(text: str) -> str:
    """The line ending a file uses: ``"\\r\\n"``, ``"\\r"`` or ``"\\n"`` (the first one found decides)."""
    index = text.find("\r")
    if index < 0:
        return "\n"
    return "\r\n" if text[index : index + 2] == "\r\n" else "\r"


def parse_entries(text: str) -> list[str]:
    """Split file text into entries (Hermes rules: split on the delimiter, strip, drop empties).

    Any line-ending convention and a leading BOM are accepted.
    """
    text = normalize_newlines(text.removeprefix(_BOM))
    return [part.strip() for part in text.split(ENTRY_DELIMITER) if part.strip()]


def entries_with_lines(text: str) -> list[tuple[int, str]]:
    r""":func:`parse_entries`, each entry with the 1-based line it starts on (for reports that point into a file).

    Example:
        >>> entries_with_lines("first\n§\n\nsecond\nline")
        [(1, 'first'), (4, 'second\nline')]
    """
    text = normalize_newlines(text.removeprefix(_BOM))
    out: list[tuple[int, str]] = []
    line = 1
    for part in text.split(ENTRY_DELIMITER):
        stripped = part.strip()
        if stripped:
            out.append((line + part[: len(part) - len(part.lstrip())].count("\n"), stripped))
        line += part.count("\n") + ENTRY_DELIMITER.count("\n")
    return out


def dedupe(entries: Sequence[str]) -> list[str]:
    """``entries`` without repeats, first occurrence kept (Hermes de-duplicates on load)."""
    return list(dict.fromkeys(entries))


def render_entries(entries: Sequence[str], newline: str = "\n") -> str:
    """The file text for ``entries``: exactly what Hermes writes (no trailing newline), in ``newline`` endings."""
    text = ENTRY_DELIMITER.join(normalize_newlines(e) for e in entries)
    return text if newline == "\n" else text.replace("\n", newline)


def format_usage(used: int, limit: int) -> str:
    """``"67% - 1,474/2,200 chars"``: floored and capped at 100% like Hermes; over the limit says so."""
    if limit <= 0:
        return f"0% - {used:,}/{limit:,} chars"
    pct = min(100, used * 100 // limit)
    text = f"{pct}% - {used:,}/{limit:,} chars"
    if used > limit:
        text += f" - OVER THE LIMIT by {used - limit:,} chars"
    return text


@dataclass(frozen=True)
class FileState:
    """What a memory file holds right now.

    ``entries`` are de-duplicated and have hand-appended text split off (see the module docstring);
    ``hand_edits`` lists the texts that were split off, ``suspect`` the entries longer than the file's limit
    that no record explains (Hermes's drift signal), ``backup`` a copy saved before anything was decided.
    """

    entries: tuple[str, ...]
    text: str
    corrupt: str | None = None  # why the file could not be parsed; None when it is fine
    backup: Path | None = None
    newline: str = "\n"
    hand_edits: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()
    raw_chars: int = 0

    @property
    def chars(self) -> int:
        return len(ENTRY_DELIMITER.join(self.entries))

    @property
    def file_chars(self) -> int:
        """Characters of the file as it is on disk (before de-duplication)."""
        return self.raw_chars or self.chars


# --------------------------------------------------------------------------------------------------
# The Hermes lock: fcntl.flock on <file>.lock
# --------------------------------------------------------------------------------------------------
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: Path) -> threading.Lock:
    key = os.path.abspath(path)
    with _THREAD_LOCKS_GUARD:
        lock = _THREAD_LOCKS.get(key)
        if lock is None:
            lock = _THREAD_LOCKS[key] = threading.Lock()
        return lock


class HermesLock:
    """The exclusive lock Hermes's memory tool takes: ``flock(LOCK_EX)`` on ``<file>.lock`` beside the file.

    The lock file is created owner-only (0600), an existing one is tightened to 0600, and a symlink in its
    place is refused (``O_NOFOLLOW``). Threads of one process queue on an in-process lock first, so only one
    of them polls ``flock``. On Windows, ``msvcrt.locking`` on the first byte, as Hermes does.

    Example:
        >>> import tempfile, pathlib
        >>> lock = HermesLock(pathlib.Path(tempfile.mkdtemp()) / "MEMORY.md")
        >>> with lock.hold(timeout=1):
        ...     lock.path.name
        'MEMORY.md.lock'
    """

    def __init__(self, target: Path) -> None:
        self.path = Path(target).with_name(Path(target).name + ".lock")
        self._thread_lock = _thread_lock(self.path)

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            if hasattr(os, "fchmod"):
                with contextlib.suppress(OSError):
                    os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def hold(self, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold the lock; raise ``TimeoutError`` after ``timeout`` seconds, ``OSError`` when it cannot be made."""
        deadline = time.monotonic() + timeout
        if not self._thread_lock.acquire(timeout=max(0.0, timeout)):
            raise TimeoutError(str(self.path))
        try:
            make_private_dirs(self.path.parent)
            fd = self._open()
            try:
                _acquire(fd, deadline)
                try:
                    yield
                finally:
                    _release(fd)
            finally:
                os.close(fd)
        finally:
            self._thread_lock.release()

    def try_hold(self) -> contextlib.AbstractContextManager[None]:
        """Like :meth:`hold` but never waits (``TimeoutError`` when busy)."""
        return self.hold(timeout=0.0)


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _acquire(fd: int, deadline: float) -> None:
        while True:
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return
            except OSError:
                if time.monotonic() >= deadline:
                    raise TimeoutError("lock busy") from None
                time.sleep(LOCK_POLL_S)

    def _release(fd: int) -> None:
        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _acquire(fd: int, deadline: float) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError("lock busy") from None
                time.sleep(LOCK_POLL_S)

    def _release(fd: int) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------------------------------
class MemoryFile:
    """A lock-protected, atomically written entry file.

    Example:
        >>> import tempfile, pathlib
        >>> f = MemoryFile(pathlib.Path(tempfile.mkdtemp()) / "MEMORY.md", limit=2200)
        >>> f.update(lambda entries: entries + ["likes tea"]).entries
        ('likes tea',)
    """

    def __init__(self, path: Path, *, limit: int, state_dir: Path | None = None, read_only: bool = False) -> None:
        self.path = Path(path)
        self.limit = limit
        self.state_dir = state_dir or self.path.parent / ".ironmem"
        #: Opened for inspection: reads only; no lock file, no backup, no record is ever created, and a write
        #: raises :class:`~ironmem.core.errors.ReadOnlyError`.
        self.read_only = read_only
        self.lock = HermesLock(self.path)
        self._backed_up: dict[str, Path] = {}
        self._known_cache: tuple[float, int, tuple[str, ...]] | None = None
        if not read_only:
            self._clean_at_open()

    @property
    def lock_path(self) -> Path:
        return self.lock.path

    @property
    def known_path(self) -> Path:
        """Where the entries ironmem last wrote to this file are recorded (to tell hand edits apart)."""
        return self.state_dir / f"{self.path.name}.known"

    # -- reading ------------------------------------------------------------------------------
    def read(self) -> FileState:
        """Read the file without locking (a reader sees either the old or the new file: writes are atomic)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return FileState((), "")
        except OSError as exc:
            return FileState(
                (), "", corrupt=f"{self.path.name} could not be read ({exc.strerror or exc}); it was not changed"
            )
        return self._decode(raw)

    def read_bytes_limited(self, limit: int) -> tuple[bytes, int]:
        """The first ``limit`` bytes of the file and its full size (for ``show`` on huge files)."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                return handle.read(limit), size
        except FileNotFoundError:
            return b"", 0

    def _decode(self, raw: bytes) -> FileState:
        problem: str | None = None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"{self.path.name} is not valid UTF-8 (byte {exc.start}), so it could not be read"
            text = ""
        else:
            if "\x00" in text:
                problem = (
                    f"{self.path.name} contains NUL bytes (byte {text.index(chr(0))}); it is not a text file, "
                    "so it could not be read"
                )
        if problem:
            return FileState((), "", corrupt=problem, backup=self._backup_corrupt(raw))
        newline = detect_newline(text)
        text = normalize_newlines(text.removeprefix(_BOM))
        entries = dedupe(parse_entries(text))
        return FileState(tuple(entries), text, newline=newline, raw_chars=len(text.strip()))

    def _backup_corrupt(self, raw: bytes) -> Path | None:
        """Copy an unparsable file aside once per distinct content, so the user can recover it (not when
        opened read-only: then the file itself is the only copy, and it is left as it is)."""
        if self.read_only:
            return None
        digest = hashlib.sha256(raw).hexdigest()[:12]
        if digest in self._backed_up:
            return self._backed_up[digest]
        backup_dir = self.state_dir / "backups"
        target = backup_dir / f"{self.path.name}.{digest}.corrupt"
        try:
            if not target.exists():
                write_private(target, raw)
        except OSError as exc:
            log.error("could not back up %s to %s: %s", self.path, target, exc)
        self._backed_up[digest] = target
        return target

    def save_backup(self) -> Path | None:
        """Save a unique ``<file>.bak.<unix time>[-n]`` copy beside the file (Hermes's drift-guard name).

        One copy per distinct content: the same bytes are not copied twice. Returns None when there is no file.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        digest = "bak:" + hashlib.sha256(raw).hexdigest()
        known = self._backed_up.get(digest)
        if known is not None and known.exists():
            return known
        stamp = int(time.time())
        for n in range(1000):
            candidate = self.path.with_name(f"{self.path.name}.bak.{stamp}" + (f"-{n}" if n else ""))
            try:
                fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as handle:
                handle.write(raw)
                handle.flush()
                os.fsync(handle.fileno())
            self._backed_up[digest] = candidate
            return candidate
        raise MemoryFileError(f"could not find a free backup name for {self.path}")  # pragma: no cover

    # -- what ironmem last wrote ---------------------------------------------------------------
    def known_entries(self) -> tuple[str, ...] | None:
        """The entries ironmem last wrote (or first saw, clean) in this file; None when there is no record."""
        try:
            stat = self.known_path.stat()
        except OSError:
            return None
        cached = self._known_cache
        if cached is not None and cached[0] == stat.st_mtime and cached[1] == stat.st_size:
            return cached[2]
        try:
            data = json.loads(self.known_path.read_text(encoding="utf-8"))
            entries = tuple(str(e) for e in data["entries"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        self._known_cache = (stat.st_mtime, stat.st_size, entries)
        return entries

    def record_known(self, entries: Sequence[str]) -> None:
        """Remember ``entries`` as written by ironmem (best effort: a failure only weakens hand-edit splitting)."""
        if self.read_only or self.known_entries() == tuple(entries):
            return
        try:
            write_private(self.known_path, json.dumps({"entries": list(entries)}, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:
            log.warning("could not record the entries written to %s (%s)", self.path, exc)

    def note_clean(self, state: FileState) -> None:
        """First contact with a folder: record a clean file as the baseline for spotting later hand edits."""
        if state.corrupt or self.known_entries() is not None or not self.path.exists():
            return
        if any(len(e) > self.limit for e in state.entries):
            return
        self.record_known(state.entries)

    def reconcile(self, state: FileState) -> FileState:
        """Split hand-appended text off known entries; flag unexplained over-limit entries (see module doc)."""
        if state.corrupt or not state.entries:
            return state
        known = self.known_entries()
        if known is None:
            suspect = tuple(e for e in state.entries if len(e) > self.limit)
            return replace(state, suspect=suspect) if suspect else state
        known_set = set(known)
        by_length = sorted(known_set, key=len, reverse=True)
        out: list[str] = []
        hand: list[str] = []
        for entry in state.entries:
            if entry in known_set:
                out.append(entry)
                continue
            split = _split_known(entry, by_length)
            if split is None:
                out.append(entry)
                continue
            before, known_part, after = split
            for piece in (before, known_part, after):
                if piece:
                    out.append(piece)
            hand.extend(p for p in (before, after) if p)
        entries = dedupe(out)
        suspect = tuple(e for e in entries if len(e) > self.limit and e not in known_set)
        if not hand and not suspect:
            return state
        return replace(state, entries=tuple(entries), hand_edits=tuple(hand), suspect=suspect)

    # -- writing ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[FileState]:
        """Hold the exclusive lock and yield the state re-read from disk under it (hand edits reconciled).

        Raises :class:`MemoryFileError` (saying why) when the lock cannot be taken: the folder is not writable,
        or another process (ironmem or Hermes) kept the file locked for ``LOCK_TIMEOUT_S`` seconds.
        """
        if self.read_only:
            raise ReadOnlyError(
                f"{self.path} was opened read-only (for inspection); nothing was written. Open the memory home "
                "for writing (MemoryManager(..., read_only=False)) as a user who may write it"
            )
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(self.lock.hold(LOCK_TIMEOUT_S))
        except TimeoutError:
            raise MemoryFileError(
                f"{self.path.name} is locked by another process (lock file {self.lock_path}, the same lock Hermes "
                f"uses) and stayed locked for {LOCK_TIMEOUT_S:g} s; nothing was written. Retry when the other "
                "writer has finished"
            ) from None
        except OSError as exc:
            raise MemoryFileError(
                f"cannot lock {self.path} ({exc.strerror or exc}: {exc.filename or self.lock_path}): the memory "
                "folder must be writable and the lock file must not be a symlink. Nothing was written; fix the "
                "folder or point ironmem at another home"
            ) from exc
        with stack:
            self._clean_stray_temp_files()
            yield self.reconcile(self.read())

    def update(self, change: Callable[[list[str]], list[str]]) -> FileState:
        """Apply ``change`` to the current entries under the lock and write the result atomically.

        ``change`` may raise to abort; nothing is written then. Returns the new state.
        """
        with self.locked() as state:
            if state.corrupt:
                raise MemoryFileError(
                    f"{state.corrupt}. A copy is at {state.backup}. Fix or delete {self.path} and retry; "
                    "ironmem will not overwrite a file it cannot parse."
                )
            new_entries = change(list(state.entries))
            if list(new_entries) == list(state.entries) and not state.hand_edits:
                return state
            return self.write_entries(new_entries, like=state)

    def write_entries(self, entries: Sequence[str], *, like: FileState | None = None) -> FileState:
        """Write ``entries`` atomically in the line endings of ``like``. Call only inside :meth:`locked`."""
        newline = like.newline if like is not None else "\n"
        if like is not None and (like.hand_edits or like.suspect):
            self.save_backup()
        text = render_entries(entries, newline)
        self._write_atomic(text)
        # an entry no record explains stays unexplained, so it stays protected from replace/remove
        suspect = set(like.suspect) if like is not None else set()
        self.record_known([e for e in entries if e not in suspect])
        return FileState(tuple(entries), normalize_newlines(text), newline=newline)

    def _write_atomic(self, text: str) -> None:
        """Write ``text`` to a temp file in the same folder, fsync it, and rename it over the file.

        A crash at any point leaves either the old file or the new one (a stray temp file at worst, removed at
        the next open or write). Any OS error (disk full, read-only file system, quota, I/O error) becomes a
        :class:`MemoryFileError` naming the file and the cause; the old file is untouched and no temp file stays.
        """
        try:
            write_private(self.path, text.encode("utf-8"))
        except OSError as exc:
            raise MemoryFileError(
                f"could not write {self.path}: {exc.strerror or exc}. The previous file is intact; "
                "free disk space or make the folder writable, then retry."
            ) from exc
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _clean_at_open(self) -> None:
        """Remove temp files a killed writer left, if they exist and no writer is busy now (never waits)."""
        pattern = f"{_TMP_PREFIX}{self.path.name}.*"
        try:
            if not any(self.path.parent.glob(pattern)):
                return
            with self.lock.try_hold():
                self._clean_stray_temp_files()
        except (TimeoutError, OSError):
            pass

    def _clean_stray_temp_files(self) -> None:
        """Remove temp files a killed writer left behind. Safe: we hold the lock, so no writer is mid-write."""
        pattern = f"{_TMP_PREFIX}{self.path.name}.*"
        for stray in self.path.parent.glob(pattern):
            with contextlib.suppress(OSError):
                stray.unlink()


def _split_known(entry: str, known_by_length: list[str]) -> tuple[str, str, str] | None:
    """``(before, known, after)`` when ``entry`` is a known entry with text added on lines before or after it."""
    for known in known_by_length:
        if not known or len(known) >= len(entry):
            continue
        if entry.startswith(known) and entry[len(known)] == "\n":
            return "", known, entry[len(known) :].strip()
        if entry.endswith(known) and entry[-len(known) - 1] == "\n":
            return entry[: -len(known)].strip(), known, ""
    return None

