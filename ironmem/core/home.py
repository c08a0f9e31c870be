"""Where the memory home is: ``--home``, ``$IRONMEM_HOME``, ``~/.ironmem``, and Hermes's own folders.

A memory home is the folder holding ``MEMORY.md`` and ``USER.md``. Hermes keeps them in ``$HERMES_HOME/memories``
(``HERMES_HOME`` defaults to ``~/.hermes``); that folder works as an ironmem home as it is, and pointing at a
Hermes root (the folder holding ``memories/``) finds its ``memories`` folder.

:func:`find_home` is what the ``ironmem`` command uses before it opens a manager: it never creates anything, and
it says whether this user may write the home, so read commands can open it read-only
(``MemoryManager(home, read_only=True)``) and write commands can refuse with the fix.

Example:
    >>> import tempfile
    >>> location = find_home(tempfile.mkdtemp())
    >>> location.origin, location.writable
    ('--home', True)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, ReadOnlyError

__all__ = [
    "HOME_FILES",
    "HomeLocation",
    "default_home",
    "find_home",
    "hermes_home",
    "hermes_memories",
    "memory_folder",
]

#: The files that make a folder a memory home.
HOME_FILES = ("MEMORY.md", "USER.md")


def default_home() -> Path:
    """``$IRONMEM_HOME``, else ``~/.ironmem``."""
    return Path(os.environ.get("IRONMEM_HOME") or Path.home() / ".ironmem").expanduser()


def hermes_home() -> Path:
    """Hermes's root folder: ``$HERMES_HOME``, else ``~/.hermes`` (whether it exists or not)."""
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes").expanduser()


def _has_memory_files(folder: Path) -> bool:
    return any((folder / name).exists() for name in HOME_FILES)


def memory_folder(path: str | os.PathLike[str]) -> Path:
    """``path``, or its ``memories`` folder when ``path`` is a Hermes root (no memory files of its own, and a
    ``memories/`` folder that has them)."""
    folder = Path(path).expanduser()
    memories = folder / "memories"
    if not _has_memory_files(folder) and memories.is_dir() and _has_memory_files(memories):
        return memories
    return folder


def hermes_memories() -> Path | None:
    """Hermes's memory folder on this machine (``$HERMES_HOME/memories``) when it holds memory files, else None."""
    folder = hermes_home() / "memories"
    return folder if folder.is_dir() and _has_memory_files(folder) else None


@dataclass(frozen=True)
class HomeLocation:
    """A memory home found by :func:`find_home`."""

    path: Path
    #: Where it came from: ``--home`` (or the caller's label), ``IRONMEM_HOME`` or ``default``.
    origin: str
    #: Whether this user may change it (create, lock and replace files in it).
    writable: bool

    def require_writable(self, action: str = "this command") -> None:
        """Raise :class:`ReadOnlyError` (saying what to do) unless the home is writable."""
        if not self.writable:
            raise ReadOnlyError(
                f"memory home {self.path} (from {self.origin}) is read-only for this user, and {action} changes "
                "it; nothing was changed. Run it as a user who may write the folder (or make it writable); the "
                "read commands (status, show, search, scan, tokens) work on it as it is"
            )


def _writable(folder: Path) -> bool:
    # os.access asks the kernel: it knows a read-only mount (EROFS) and a root without CAP_DAC_OVERRIDE.
    return os.access(folder, os.W_OK | os.X_OK)


def find_home(home: str | os.PathLike[str] | None = None, *, origin: str = "--home") -> HomeLocation:
    """The memory home to open: ``home`` if given (labelled ``origin``), else ``$IRONMEM_HOME``, else
    ``~/.ironmem``; a Hermes root resolves to its ``memories`` folder. Creates nothing.

    Raises :class:`ConfigError` when the folder does not exist, is not a folder, or cannot be read; the message
    names a Hermes memory folder found on this machine, if any.
    """
    if home is not None and str(home) != "":
        path = Path(home).expanduser()
    elif os.environ.get("IRONMEM_HOME"):
        path, origin = Path(os.environ["IRONMEM_HOME"]).expanduser(), "IRONMEM_HOME"
    else:
        path, origin = default_home(), "default"
    if not path.exists():
        hint = (
            f"it is created the first time an agent uses ironmem there, and `ironmem setup --home {path}` creates "
            "it empty now (with a config.yaml); pass --home PATH or set IRONMEM_HOME to use another folder (a "
            "Hermes folder such as ~/.hermes/memories works as is)"
        )
        hermes = hermes_memories()
        if hermes is not None and hermes != path:
            hint += f". Hermes keeps its memory in {hermes}: --home {hermes} uses it"
        raise ConfigError(f"memory home {path} (from {origin}) does not exist; {hint}")
    if not path.is_dir():
        raise ConfigError(
            f"memory home {path} (from {origin}) is not a folder; pass the folder that holds MEMORY.md and USER.md"
        )
    path = memory_folder(path)
    if not os.access(path, os.R_OK | os.X_OK):
        raise ConfigError(f"memory home {path} (from {origin}) is not readable by this user; fix its permissions")
    return HomeLocation(path, origin, _writable(path))
