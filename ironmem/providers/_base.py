"""What every shipped provider shares, whatever its backend: availability from one package, the outbox of its
writes (queued in order while the backend is down, saved under the memory home, replayed when it answers again:
see ``_outbox.py``), settings built from a settings object plus keyword overrides, ids safe for a backend, a turn
as text, and the errors of a server that ironmem talks to but does not run (Hindsight, OpenViking).

Each provider keeps what differs (its API, payloads and messages' names); this module holds only logic that is
the same for all of them.

Example:
    >>> hashed_id("alice", re.compile(r"[^a-z]+"), max_len=48, keep=36, digest=10)
    'alice'
    >>> hashed_id("bob@example.com", re.compile(r"[^a-z]+"), max_len=48, keep=36, digest=10)[:12]
    'bob_example_'
    >>> turn_text("Hi", "  ", ("User", "Assistant"))
    'User: Hi'
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from ..core.errors import ProviderUnavailableError
from ..core.provider import MemoryProvider
from ._outbox import DEFAULT_MAX_PENDING, Outbox

__all__ = ["ProviderBase", "ServerErrors", "hashed_id", "http_url", "merged_settings", "refused_for_good",
           "turn_text"]

#: HTTP answers that say the request itself is wrong: sending the same write again can never succeed.
_REFUSED_FOR_GOOD = frozenset({400, 413, 422})


def refused_for_good(exc: BaseException) -> bool:
    """True when the backend refused this write for good (HTTP 400, 413 or 422 in ``exc.status``): the outbox
    drops it (and records it) instead of retrying it forever. Outages, auth and rate limits are retried."""
    return getattr(exc, "status", None) in _REFUSED_FOR_GOOD

M = TypeVar("M", bound=BaseModel)


class ProviderBase(MemoryProvider):
    """A provider that is available when its client package imports (``requires``) and, if it overrides
    :attr:`unavailable_reason`, its own conditions hold. ``is_available()`` is ``not unavailable_reason``."""

    #: (importable module, what to say when it is missing), or None when nothing needs importing.
    requires: ClassVar[tuple[str, str] | None] = None

    @property
    def unavailable_reason(self) -> str:
        """Why :meth:`is_available` is False ("" when it is True). Cheap: imports nothing, no network."""
        if self.requires is not None and importlib.util.find_spec(self.requires[0]) is None:
            return self.requires[1]
        return ""

    def is_available(self) -> bool:
        return not self.unavailable_reason

    # -- the outbox: writes that wait for the backend ---------------------------------------------
    outbox: Outbox
    _lock: Any  # a threading.RLock of the subclass
    _users: dict[str, str]  # session id -> user id

    def _open_outbox(self, send: Callable[[dict[str, Any]], Any], *, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        """Give the provider its outbox; ``send(record)`` performs one write (a JSON record) on the backend."""
        self.outbox = Outbox(self.name, send, max_pending=max_pending, rejected=refused_for_good)

    def _attach_outbox(self, ctx: dict[str, Any]) -> None:
        """In ``initialize``: with a memory ``home``, queued writes are saved under ``<home>/<name>/`` and the ones
        an earlier run left there are queued first."""
        home = ctx.get("home")
        if home:
            self.outbox.attach(Path(str(home)) / self.name)

    def on_session_end(self, session_id: str) -> None:
        """Send what waits in the outbox, then forget the session."""
        try:
            self.outbox.drain()
        finally:
            with self._lock:
                self._forget_session(session_id)

    def _forget_session(self, session_id: str) -> None:
        """Drop what the provider kept for ``session_id`` (called with ``_lock`` held)."""
        self._users.pop(session_id, None)

    def status_info(self) -> dict[str, Any]:
        """The provider's part of ``status()`` (no network): its queued writes."""
        return {"writes": self.outbox.snapshot()}


def merged_settings(model: type[M], settings: M | None, overrides: dict[str, Any]) -> M:
    """``settings`` (or the defaults) with keyword ``overrides`` applied, validated again; a secret ``api_key``
    is carried over as its value."""
    base = settings.model_dump() if settings is not None else {}
    api_key = getattr(settings, "api_key", None)
    if api_key is not None:
        base["api_key"] = api_key.get_secret_value()
    base.update(overrides)
    return model.model_validate(base)


def hashed_id(value: str, unsafe: re.Pattern[str], *, max_len: int, keep: int, digest: int, sep: str = "_",
              strip: str = "", empty: str = "") -> str:
    """``value`` with each ``unsafe`` match made ``_`` (then ``strip`` characters trimmed; ``empty`` when nothing
    is left). A changed or longer-than-``max_len`` id keeps its first ``keep`` characters plus ``sep`` and
    ``digest`` hex characters of the original's SHA-256, so distinct inputs stay distinct."""
    clean = unsafe.sub("_", value)
    if strip:
        clean = clean.strip(strip)
    clean = clean or empty
    if clean != value or len(clean) > max_len:
        tail = hashlib.sha256(value.encode("utf-8")).hexdigest()[:digest]
        clean = f"{clean[:keep]}{sep}{tail}" if clean else tail
    return clean


def turn_text(user: str, assistant: str, labels: tuple[str, str]) -> str:
    """One exchange as ``"<label>: <text>"`` lines (user first), leaving out an empty side; "" when both are."""
    lines = [f"{label}: {text.strip()}" for label, text in zip(labels, (user, assistant), strict=True)
             if (text or "").strip()]
    return "\n".join(lines)


_HTTP_URL = re.compile(r"^https?://[^\s/]+")


def http_url(value: str, setting: str, example: str) -> str:
    """A pydantic validator's body: ``value`` without a trailing ``/``, or a ValueError naming ``setting``."""
    if not _HTTP_URL.match(value or ""):
        raise ValueError(f"{setting} must be an http(s) URL such as {example}, got {value!r}")
    return value.rstrip("/")


@dataclass(frozen=True)
class ServerErrors:
    """How the failures of a server that runs elsewhere read, as ``error`` with what to do.

    ``connection`` names the client's exception classes that mean "not reachable"; a :class:`TimeoutError` or an
    exception whose class name says ``Timeout`` is a timeout; anything else "failed".

    Example:
        >>> errors = ServerErrors("Demo", ProviderUnavailableError, "demo.url", "docs/providers/demo.md",
        ...                       frozenset({"ConnectionRefusedError"}))
        >>> print(errors.explain("recall", ConnectionRefusedError("refused"), url="http://127.0.0.1:9", timeout=5))
        Demo server at http://127.0.0.1:9 is not reachable during recall (ConnectionRefusedError: refused); start it (docs/providers/demo.md) or fix demo.url
    """

    label: str
    error: type[ProviderUnavailableError]
    setting: str
    doc: str
    connection: frozenset[str]

    def explain(self, what: str, exc: BaseException, *, url: str, timeout: float,
                detail: str | None = None) -> BaseException:
        """``exc`` (raised during ``what``) as :attr:`error`; ``detail`` replaces ``str(exc)`` in the message."""
        if isinstance(exc, self.error):
            return exc
        kind = type(exc).__name__
        text = str(exc) if detail is None else detail
        if kind in self.connection:
            return self.error(f"{self.label} server at {url} is not reachable during {what} ({kind}: {text}); "
                              f"start it ({self.doc}) or fix {self.setting}")
        if isinstance(exc, TimeoutError) or "Timeout" in kind:
            return self.error(f"{self.label} server at {url} did not answer {what} within {timeout:g}s")
        return self.error(f"{self.label} {what} failed: {kind}: {text}")

    def refused(self, what: str, status: int, detail: Any) -> ProviderUnavailableError:
        """The server answered ``what`` with HTTP ``status``: an :attr:`error` carrying ``status`` (so the outbox
        can tell a request refused for good from an outage)."""
        error = self.error(f"{self.label} server refused {what}: HTTP {status} {str(detail)[:300]}")
        error.status = status  # type: ignore[attr-defined]
        return error
