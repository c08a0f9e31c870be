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
