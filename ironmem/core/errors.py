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
