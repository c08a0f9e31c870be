"""Scopes: whose memory a file holds.

A *scope* is a string. ``""`` (the default scope) is Hermes's own layout: ``MEMORY.md`` and ``USER.md`` directly
in the memory home. Any other scope is a user id; its files live in ``users/<folder>/`` where ``<folder>`` is a
safe encoding of the id (see :func:`scope_folder`). Storage backends key a file by ``(scope, target)``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["DEFAULT_SCOPE", "MAX_SCOPE_CHARS", "USERS_DIR", "normalize_scope", "scope_folder"]

DEFAULT_SCOPE = ""
USERS_DIR = "users"
MAX_SCOPE_CHARS = 512
_SLUG_KEEP = re.compile(r"[^a-z0-9._-]+")


def normalize_scope(user_id: object) -> str:
    """The scope of ``user_id``: ``""`` for None or ``""``, else the id itself (a string, at most 512 chars).

    Raises ValueError/TypeError with what to pass instead.

    Example:
        >>> normalize_scope(None), normalize_scope("ada")
        ('', 'ada')
    """
    if user_id is None:
        return DEFAULT_SCOPE
    if not isinstance(user_id, str):
        raise TypeError(f"user_id must be a string or None, got {type(user_id).__name__}; pass str(user_id)")
    if len(user_id) > MAX_SCOPE_CHARS:
        raise ValueError(f"user_id is {len(user_id):,} characters long; at most {MAX_SCOPE_CHARS} are accepted")
    return user_id


def scope_folder(scope: str) -> str:
    """A folder name for ``scope``: a readable slug plus a hash of the exact id.

    The slug keeps ``[a-z0-9._-]`` of the lower-cased, accent-stripped id (at most 40 characters, never ``.`` or
    ``..``); the 12-hex-digit SHA-256 prefix of the exact id keeps ids apart that differ only in case, accents
    or punctuation (also on case-insensitive file systems). Path tricks (``../x``, ``/etc``, ``C:\\``, NUL)
    cannot survive the slug, so a scope can never leave ``users/``.

    Example:
        >>> scope_folder("Ada")
        'ada-99a563ab2f6e'
        >>> scope_folder("../../etc/passwd").startswith("etc")
        True
    """
    if scope == DEFAULT_SCOPE:
        raise ValueError("the default scope has no folder of its own: its files sit in the memory home")
    ascii_id = unicodedata.normalize("NFKD", scope).encode("ascii", "ignore").decode("ascii").lower()
    slug = _SLUG_KEEP.sub("-", ascii_id).strip(".-_")[:40].strip(".-_") or "user"
    digest = hashlib.sha256(scope.encode("utf-8")).hexdigest()[:12]
    return f"{slug}-{digest}"
