"""Every exception ironmem raises, in one place.

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations


class IronMemError(Exception):
    """Base class of all ironmem errors."""


class ProviderConflictError(IronMemError):
    """A second external provider was added while one is already active (rule 1, strict mode)."""


class BuiltinProviderError(IronMemError):
    """The built-in provider was asked to do something it cannot (for example, be removed)."""


class MemoryFileError(IronMemError):
    """A memory file cannot be read or written safely; the file on disk is left as it was."""


class MemoryWriteError(IronMemError):
    """A memory write was refused (over the limit, ambiguous match, blocked by the scanner, ...)."""


class ConfigError(IronMemError):
    """The configuration is invalid; the message names the key and the fix."""


class EncodingUnavailableError(IronMemError):
    """A tiktoken encoding cannot be loaded (typically offline without TIKTOKEN_CACHE_DIR)."""


class StorageError(MemoryFileError):
    """The memory storage (files or a database) cannot be used; the message says whether anything was written."""
