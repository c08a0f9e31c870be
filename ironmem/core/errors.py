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


class OperationError(MemoryWriteError, ValueError):
    """A memory tool call is malformed or cannot apply (bad action, no unique match, over the limit, ...).

    ``details`` goes into the JSON error result. ``show_entries`` names the target whose current entries (and
    usage) the result should list, so the model can pick the right ``old_text`` or consolidate; None when the
    error must not echo the store. ``limit`` is True when the change was refused for the character limit. Also a
    ``ValueError``, for callers that validate that way.
    """

    def __init__(
        self, message: str, *, show_entries: str | None = None, limit: bool = False, **details: object
    ) -> None:
        super().__init__(message)
        self.details = details
        self.show_entries = show_entries
        self.limit = limit


class PendingWriteError(IronMemError, LookupError):
    """A held memory write cannot be decided: its id is unknown, or it was already approved or rejected. Nothing
    was changed; ``ironmem review`` lists the open ones."""


class InvalidArgumentError(IronMemError, ValueError):
    """An argument passed to an ironmem API is out of range or of the wrong shape; the message says which."""


class ProviderUnavailableError(IronMemError, RuntimeError):
    """A provider cannot run: its package is not installed (the message gives the ``pip install`` line), its
    backend is down, or it was used before it was set up."""


class ScriptExhaustedError(IronMemError, RuntimeError):
    """A scripted test model (``ironmem.testing``) was called more times than its script has steps."""


class ArgumentTypeError(IronMemError, TypeError):
    """An argument passed to an ironmem API has the wrong type; the message names the type expected."""


class ClosedError(IronMemError, RuntimeError):
    """An object was used after ``close()``; create a new one."""


class ExternalServiceError(IronMemError):
    """A hosted memory service failed: bad key, rate limit, server error, timeout or an answer that does not parse.

    ``kind`` is one of ``auth``, ``rate_limited``, ``server``, ``timeout``, ``connection``, ``malformed``,
    ``client``, ``error``; ``retry_after`` is the wait in seconds the service asked for (429), if any.
    """

    def __init__(self, message: str, *, kind: str = "error", status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after


class StorageError(MemoryFileError):
    """The memory storage (files or a database) cannot be used; the message says whether anything was written."""


class ReadOnlyError(MemoryFileError):
    """A write reached memory opened read-only (``MemoryManager(read_only=True)``, a home this user cannot write);
    nothing was written. The message says how to open it for writing."""


class SessionOwnerError(IronMemError, PermissionError):
    """A conversation (thread / session id) was continued as a different user than the one who started it.

    Nothing was read or written for the second user: give each user their own thread ids (for example
    ``f"{user_id}:{conversation}"``).
    """
