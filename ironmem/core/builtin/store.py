"""One memory file (MEMORY.md or USER.md) in the Hermes format, written safely.

Entries are separated by a line holding only ``§``. Every change takes an exclusive file lock, re-reads the
file under the lock (so a concurrent writer or a hand edit is never lost), writes a temp file, fsyncs it and
swaps it in with ``os.replace``. A file that does not parse is backed up and left untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import MemoryFileError

__all__ = ["ENTRY_DELIMITER", "MemoryFile", "parse_entries", "render_entries", "format_usage"]

ENTRY_DELIMITER = "\n§\n"
_TMP_PREFIX = ".ironmem-tmp-"
LOCK_TIMEOUT_S = 30.0
#: How often a waiting writer retries the lock (filelock's default, 50 ms, makes a waiter lose to the holder's
#: next write again and again and adds up to 50 ms to every contended write).
LOCK_POLL_S = 0.002


def parse_entries(text: str) -> list[str]:
    """Split file text into entries (Hermes rules: split on the delimiter, strip, drop empties)."""
    return [part.strip() for part in text.split(ENTRY_DELIMITER) if part.strip()]


def render_entries(entries: list[str]) -> str:
    """The file text for ``entries``: exactly what Hermes writes (no trailing newline)."""
    return ENTRY_DELIMITER.join(entries)


def format_usage(used: int, limit: int) -> str:
    """``"67% - 1,474/2,200 chars"``."""
    pct = int(round(100 * used / limit)) if limit else 0
    return f"{pct}% - {used:,}/{limit:,} chars"


@dataclass(frozen=True)
class FileState:
    """What a memory file holds right now."""

    entries: tuple[str, ...]
    text: str
    corrupt: str | None = None  # why the file could not be parsed; None when it is fine
    backup: Path | None = None

    @property
    def chars(self) -> int:
        return len(render_entries(list(self.entries)))


class MemoryFile:
    """A lock-protected, atomically written entry file.

    Example:
        >>> import tempfile, pathlib
        >>> f = MemoryFile(pathlib.Path(tempfile.mkdtemp()) / "MEMORY.md", limit=2200)
        >>> f.update(lambda entries: entries + ["likes tea"]).entries
        ('likes tea',)
    """

    def __init__(self, path: Path, *, limit: int, state_dir: Path | None = None) -> None:
        self.path = Path(path)
        self.limit = limit
        self.state_dir = state_dir or self.path.parent / ".ironmem"
        self._lock = FileLock(str(self.state_dir / f"{self.path.name}.lock"), timeout=LOCK_TIMEOUT_S)
        self._backed_up: dict[str, Path] = {}
        self._clean_at_open()

    # -- reading ------------------------------------------------------------------------------
    def read(self) -> FileState:
        """Read the file without locking (a reader sees either the old or the new file: writes are atomic)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return FileState((), "")
        except OSError as exc:
            return FileState((), "", corrupt=f"cannot read {self.path}: {exc.strerror or exc}")
        return self._decode(raw)

    def _decode(self, raw: bytes) -> FileState:
        problem: str | None = None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"{self.path.name} is not valid UTF-8 (byte {exc.start})"
            text = ""
        else:
            if "\x00" in text:
                problem = f"{self.path.name} contains NUL bytes (byte {text.index(chr(0))}); it is not a text file"
        if problem:
            return FileState((), "", corrupt=problem, backup=self._backup(raw))
        return FileState(tuple(parse_entries(text)), text)

    def _backup(self, raw: bytes) -> Path:
        """Copy an unparsable file aside once per distinct content, so the user can recover it."""
        import hashlib

        digest = hashlib.sha256(raw).hexdigest()[:12]
        if digest in self._backed_up:
            return self._backed_up[digest]
        backup_dir = self.state_dir / "backups"
        backup_dir.mkdir(parents=True, exist_ok=True)
        target = backup_dir / f"{self.path.name}.{digest}.corrupt"
        if not target.exists():
            tmp = backup_dir / f"{_TMP_PREFIX}{target.name}"
            tmp.write_bytes(raw)
            os.replace(tmp, target)
        self._backed_up[digest] = target
        return target

    # -- writing ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[FileState]:
        """Hold the exclusive lock and yield the state re-read from disk under it.

        Raises :class:`MemoryFileError` (saying why) when the lock cannot be taken: the folder is not writable,
        or another process kept the file locked for ``LOCK_TIMEOUT_S`` seconds.
        """
        lock_path = self.state_dir / f"{self.path.name}.lock"
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._lock.acquire(poll_interval=LOCK_POLL_S)
        except Timeout:
            raise MemoryFileError(
                f"{self.path.name} is locked by another process (lock file {lock_path}) and stayed locked for "
                f"{LOCK_TIMEOUT_S:g} s; nothing was written. Retry; if no ironmem process is running, delete the "
                "lock file"
            ) from None
        except OSError as exc:
            raise MemoryFileError(
                f"cannot lock {self.path} ({exc.strerror or exc}: {exc.filename or lock_path}): the memory folder "
                "must be writable. Nothing was written; fix the folder's permissions or point ironmem at another home"
            ) from exc
        try:
            self._clean_stray_temp_files()
            yield self.read()
        finally:
            self._lock.release()

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
            if list(new_entries) == list(state.entries):
                return state
            text = render_entries(list(new_entries))
            self._write_atomic(text)
            return FileState(tuple(new_entries), text)

    def write_entries(self, entries: list[str]) -> None:
        """Write ``entries`` atomically. Call only inside :meth:`locked`."""
        self._write_atomic(render_entries(entries))

    def _write_atomic(self, text: str) -> None:
        """Write ``text`` to a temp file in the same folder, fsync it, and rename it over the file.

        A crash at any point leaves either the old file or the new one (a stray temp file at worst, removed at
        the next open or write). Any OS error (disk full, read-only file system, quota, I/O error) becomes a
        :class:`MemoryFileError` naming the file and the cause; the old file is untouched and no temp file stays.
        """
        tmp_name: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(OSError):
                if self.path.exists():
                    shutil.copymode(self.path, tmp_name)  # keep the user's permissions
                else:
                    os.chmod(tmp_name, 0o666 & ~_UMASK)  # a new file gets the usual mode, not mkstemp's 0600
            os.replace(tmp_name, self.path)
        except BaseException as exc:
            if tmp_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)
            if isinstance(exc, OSError):
                raise MemoryFileError(
                    f"could not write {self.path}: {exc.strerror or exc}. The previous file is intact; "
                    "free disk space or make the folder writable, then retry."
                ) from exc
            raise
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def _clean_at_open(self) -> None:
        """Remove temp files a killed writer left, if they exist and no writer is busy now (never waits).

        Safe: temp files are only created under the lock, so while we hold it none of them is being written.
        When the lock is busy, the writer holding it (or the next one) cleans them instead.
        """
        pattern = f"{_TMP_PREFIX}{self.path.name}.*"
        try:
            if not any(self.path.parent.glob(pattern)):
                return
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with self._lock.acquire(blocking=False):
                self._clean_stray_temp_files()
        except (Timeout, OSError):
            pass

    def _clean_stray_temp_files(self) -> None:
        """Remove temp files a killed writer left behind. Safe: we hold the lock, so no writer is mid-write."""
        pattern = f"{_TMP_PREFIX}{self.path.name}.*"
        for stray in self.path.parent.glob(pattern):
            with contextlib.suppress(OSError):
                stray.unlink()


def _read_umask() -> int:
    """The process umask. Reading it means setting it, so it is read once, at import, not while threads write."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()
