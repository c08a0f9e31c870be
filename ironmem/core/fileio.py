"""One way to replace a small file whole: temp file in the same folder, fsync, ``os.replace``.

Whatever stops the writer (an error, Ctrl-C, ``SystemExit``) removes the temp file before the exception goes on,
so an interrupted writer leaves either the old file or the new one, and no ``.ironmem-tmp-*`` beside them. Only a
killed process (SIGKILL, power loss) can leave a temp file; the memory files remove those at their next open.

Example:
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.json"
    >>> write_atomic(path, b'{"a": 1}')
    >>> path.read_bytes()
    b'{"a": 1}'
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["TMP_PREFIX", "write_atomic"]

#: Prefix of every temp file ironmem writes beside a file it replaces.
TMP_PREFIX = ".ironmem-tmp-"


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; ``mode`` sets the new file's permissions (default: mkstemp's
    0600, owner only). Raises the ``OSError`` of a failed write, with no temp file left behind."""
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
