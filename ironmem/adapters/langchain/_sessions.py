"""Which ironmem ``Session`` a LangChain run belongs to: one session per thread id, cached.

Translation only: a thread id and a user id are read from the run's config / context and handed to
:meth:`MemoryManager.start_session`; every memory rule stays in the core session.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ...core.errors import ArgumentTypeError
from ...core.manager import MemoryManager
from ...core.session import Session
from .._owner import check_owner

__all__ = ["SessionRegistry", "check_owner", "require_source", "thread_id_from_config", "user_id_from"]

def require_source(value: Any, owner: str) -> Session | MemoryManager:
    """``value`` when it is an ironmem Session or MemoryManager; else a TypeError that shows how to make one."""
    if not isinstance(value, Session | MemoryManager):
        raise ArgumentTypeError(
            f"{owner} takes an ironmem Session or MemoryManager, got {type(value).__name__}; "
            f"e.g. {owner}(MemoryManager(home='~/.ironmem'))"
        )
    return value


def thread_id_from_config(config: Mapping[str, Any] | None) -> str | None:
    """``config["configurable"]["thread_id"]`` as a string, or None."""
    if not config:
        return None
    configurable = config.get("configurable") or {}
    value = configurable.get("thread_id")
    return None if value is None or value == "" else str(value)


def user_id_from(context: Any = None, config: Mapping[str, Any] | None = None) -> str | None:
    """A user id from the run's context (``context.user_id`` or ``context["user_id"]``), else from
    ``config["configurable"]["user_id"]``, else None."""
    value: Any = None
    if isinstance(context, Mapping):
        value = context.get("user_id")
    elif context is not None:
        value = getattr(context, "user_id", None)
    if value is None and config:
        value = (config.get("configurable") or {}).get("user_id")
    return None if value is None or value == "" else str(value)


class SessionRegistry:
    """Sessions of one manager keyed by thread id. Runs without a thread id share one fresh id."""

    def __init__(self, manager: MemoryManager, *, user_id: str | None = None) -> None:
        if not isinstance(manager, MemoryManager):
            raise ArgumentTypeError(
                f"expected an ironmem MemoryManager, got {type(manager).__name__}; "
                "create one with ironmem.MemoryManager(home=...)"
            )
        self.manager = manager
        self.user_id = user_id
        self.default_id = f"lc-{uuid.uuid4().hex}"
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def get(
        self,
        thread_id: str | None = None,
        user_id: str | None = None,
        *,
        snapshot: dict[str, Any] | None = None,
        shown: Iterable[str] = (),
    ) -> Session:
        """The session of ``thread_id`` (started on first use, from a saved ``snapshot`` when resuming, with the
        recall texts its earlier turns were ``shown``).

        Raises :class:`~ironmem.core.errors.SessionOwnerError` when the thread was started by another user.
        """
        key = thread_id or self.default_id
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self.manager.start_session(key, user_id=user_id or self.user_id, snapshot=snapshot)
                if snapshot is not None:
                    session.restore_shown(shown)
                self._sessions[key] = session
            else:
                check_owner(key, session.user_id, user_id)
            return session

    def peek(self, thread_id: str | None = None) -> Session | None:
        with self._lock:
            return self._sessions.get(thread_id or self.default_id)

    @property
    def sessions(self) -> dict[str, Session]:
        with self._lock:
            return dict(self._sessions)

    def end(self, thread_id: str | None = None) -> bool:
        """End and forget the session of ``thread_id``. False when there was none."""
        with self._lock:
            session = self._sessions.pop(thread_id or self.default_id, None)
        if session is None:
            return False
        session.end()
        return True

    def end_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.end()
