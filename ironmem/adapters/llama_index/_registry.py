"""Process-level handles for live objects that LlamaIndex workflows copy and serialize.

Workflows deep-copy their state (``ctx.store.edit_state()``) and serialize it between runs
(``Context.to_dict()``, which calls ``to_dict()`` on every component and ``from_dict()`` to rebuild it).
A memory that held its manager in a pydantic field would be copied into a second, diverging memory, or fail
to serialize and be silently replaced. Instead the adapter objects keep only a string handle in their fields
and look the live object up here, so every copy and every rebuilt instance in this process shares one state.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

_lock = threading.Lock()
_live: dict[str, Any] = {}


def new_handle() -> str:
    return uuid.uuid4().hex


def register(handle: str, obj: Any) -> None:
    with _lock:
        _live[handle] = obj


def lookup(handle: str) -> Any | None:
    with _lock:
        return _live.get(handle)


def unregister(handle: str) -> None:
    with _lock:
        _live.pop(handle, None)


def count() -> int:
    with _lock:
        return len(_live)


#: The user each session id was first opened with in this process, per memory home: a session id that another
#: user opens next is refused (see :func:`claim`).
_owners: dict[tuple[str, str], str | None] = {}


def claim(home: str, session_id: str, user_id: str | None) -> str | None:
    """The user session ``session_id`` (of the memory at ``home``) belongs to in this process.

    The first caller claims it; a later caller naming another user gets
    :class:`~ironmem.core.errors.SessionOwnerError`; a later caller naming no user continues as the owner.
    """
    from .._owner import check_owner

    with _lock:
        key = (home, session_id)
        if key not in _owners:
            _owners[key] = user_id
            return user_id
        owner = _owners[key]
    check_owner(session_id, owner, user_id, kind="session")
    return owner


def release(home: str, session_id: str) -> None:
    """Forget the claim on ``session_id`` (its memory was closed; a persistent history keeps its owner in its
    resume log)."""
    with _lock:
        _owners.pop((home, session_id), None)
