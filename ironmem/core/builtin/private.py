"""Files and folders private to their owner: what the built-in provider creates is ``0600`` / ``0700``.

Memory is personal data (who the user is, what they said). Everything ironmem creates under a memory home (the
Hermes files, their lock files, records, backups, the archive, the SQLite index) is readable by its owner only,
whatever the process umask says: a folder is ``chmod``-ed to ``0700`` right after ``mkdir`` (the umask can only
remove bits, so the mode passed to ``mkdir`` is not enough when a umask is ``0``), a file is opened with
``0600``. Folders and files that already exist keep the modes their owner gave them.

Example:
    >>> import tempfile, pathlib, stat
    >>> folder = pathlib.Path(tempfile.mkdtemp()) / "a" / "b"
    >>> make_private_dirs(folder)
    >>> oct(stat.S_IMODE(folder.stat().st_mode)), oct(stat.S_IMODE(folder.parent.stat().st_mode))
    ('0o700', '0o700')
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..errors import ReadOnlyError
from ..fileio import write_atomic

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "create_private_file",
    "make_private_dirs",
    "not_writable",
    "prepare_home",
    "write_private",
]

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def make_private_dirs(path: Path | str) -> None:
    """Create ``path`` and its missing parents; each folder created here is ``0700`` (existing ones unchanged).

    Raises ``OSError`` as ``mkdir`` does (a read-only or full file system); callers turn it into an ironmem error.
    """
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if folder.is_dir():
                continue  # made by another process meanwhile: its mode is the one it chose
            raise
        with contextlib.suppress(OSError):
            os.chmod(folder, PRIVATE_DIR_MODE)


def create_private_file(path: Path | str) -> None:
    """Create ``path`` empty and ``0600`` if it does not exist (before a library such as SQLite opens it, so the
    file and the journal files SQLite gives the same mode are private). Never follows a symlink it creates."""
    path = Path(path)
    if path.exists():
        return
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


def write_private(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`~ironmem.core.fileio.write_atomic`); a new file is ``0600``,
    an existing one keeps its mode. The folder is created private when missing."""
    path = Path(path)
    make_private_dirs(path.parent)
    try:
        mode: int | None = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = None  # write_atomic's temp file is 0600 already
    write_atomic(path, data, mode=mode)


def not_writable(where: Path | str, exc: BaseException) -> ReadOnlyError:
    """The error for a memory home this user cannot write: the path, the cause, and the two ways out."""
    cause = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return ReadOnlyError(
        f"the memory home cannot be written at {where} ({cause}). To inspect it, open it read-only: "
        "MemoryManager(home, read_only=True) (or the `ironmem status/show/search` commands); to use it, make the "
        "folder writable for this user or point ironmem at another home (MemoryManager(home=...), IRONMEM_HOME)"
    )


def prepare_home(home: Path, state_dir: Path) -> None:
    """Create ``home`` and its ``.ironmem`` folder (private when new), or raise :func:`not_writable`'s error."""
    try:
        make_private_dirs(state_dir)
        if not os.access(state_dir, os.W_OK):
            raise PermissionError(13, "Permission denied", str(state_dir))
    except OSError as exc:
        raise not_writable(getattr(exc, "filename", None) or state_dir, exc) from exc
