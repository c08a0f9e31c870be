"""Failure isolation for the external provider: per-hook timeouts, health, the ordered background worker, and
:class:`GuardedProvider`, the one way the rest of ironmem calls into the external provider."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .provider import MemoryProvider
from .security import redact_secrets

__all__ = ["ProviderHealth", "Guard", "Background", "GuardedProvider", "redact_content"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# --------------------------------------------------------------------------------------------------
# Health and isolation of the external provider
# --------------------------------------------------------------------------------------------------
@dataclass
class ProviderHealth:
    """What ``status()`` reports for one provider: degraded while any hook's last call failed."""

    name: str
    kind: str  # "builtin" | "external"
    reason: str = ""
    failures: int = 0
    last_failure_at: float | None = None
    failing: dict[str, str] = field(default_factory=dict)  # hook -> why its last call failed

    @property
    def state(self) -> str:
        return "degraded" if self.failing else "active"

    def fail(self, hook: str, reason: str) -> None:
        self.failing[hook] = reason
        self.reason = reason
        self.failures += 1
        self.last_failure_at = time.time()

    def ok(self, hook: str) -> None:
        self.failing.pop(hook, None)
        if self.failing:
            self.reason = next(reversed(self.failing.values()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "state": self.state}
        if self.failing:
            out["reason"] = self.reason
            out["failing_hooks"] = dict(self.failing)
        if self.failures:
            out["failures"] = self.failures
        return out


class Guard:
    """Runs calls into the external provider so that a raise or a hang never reaches the caller."""

    def __init__(self, provider: MemoryProvider, health: ProviderHealth) -> None:
        self.provider = provider
        self.health = health
        self._busy: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def call(self, hook: str, fn: Callable[[], T], default: T, *, timeout: float | None = None) -> T:
        """Call ``fn``; on an exception or after ``timeout`` seconds, record it and return ``default``."""
        if timeout is None:
            try:
                result = fn()
            except Exception as exc:
                self._failed(hook, f"{hook} raised {type(exc).__name__}: {exc}")
                return default
            self.health.ok(hook)
            return result
        with self._lock:
            running = self._busy.get(hook)
            if running is not None and running.is_alive():
                # The previous call never came back; don't pile up threads behind a hung backend.
                self._failed(hook, f"{hook} skipped: an earlier call is still running (hung provider)")
                return default
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:
                box["error"] = exc

        worker = threading.Thread(target=target, name=f"ironmem-{self.provider.name}-{hook}", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            with self._lock:  # only a call that overran its timeout blocks later calls of the same hook
                self._busy[hook] = worker
            self._failed(hook, f"{hook} timed out after {timeout:g}s")
            return default
        if "error" in box:
            error = box["error"]
            self._failed(hook, f"{hook} raised {type(error).__name__}: {error}")
            return default
        self.health.ok(hook)
        return box.get("value", default)

    def _failed(self, hook: str, reason: str) -> None:
        log.warning("external memory provider %r: %s", self.provider.name, reason)
        self.health.fail(hook, reason)


class Background:
    """One worker thread that runs queued calls in order (turn N lands before turn N+1)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ironmem-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except Exception:  # jobs are guarded; this is a last line of defence
                log.exception("background memory job failed")
            finally:
                self._queue.task_done()

    def submit(self, job: Callable[[], None]) -> None:
        self._queue.put(job)

    def drain(self, timeout: float) -> bool:
        """Wait until every job queued so far has run. False if ``timeout`` passed first."""
        done = threading.Event()
        self._queue.put(done.set)
        return done.wait(timeout)

    def stop(self, timeout: float) -> None:
        self.drain(timeout)
        self._queue.put(None)


# --------------------------------------------------------------------------------------------------
# The one guarded call
# --------------------------------------------------------------------------------------------------
def redact_content(value: Any) -> Any:
    """``value`` with secrets masked in every string it holds (strings, and lists / dicts of them)."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: redact_content(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_content(v) for v in value]
    return value


class GuardedProvider:
    """The external provider behind one guard: every call into it from the manager and its sessions goes through
    :meth:`call` (now, bounded) or :meth:`submit` (in the background, in order).

    Each call is bounded by a timeout (``fast_timeout`` for what a turn waits on, ``timeout`` otherwise), its
    exception or hang is caught and recorded in :attr:`health`, and what it sends is redacted: positional
    arguments are content (secrets masked, see :func:`redact_content`); keyword arguments are identifiers and
    flags, passed as they are. A hook the provider does not define returns ``default``.

    Example:
        >>> from ironmem.testing.faulty import RaisingProvider
        >>> guarded = GuardedProvider(RaisingProvider(), timeout=1.0, fast_timeout=1.0)
        >>> guarded.call("prefetch", "hello", session_id="s1", default="", fast=True)
        ''
        >>> guarded.health.state
        'degraded'
        >>> guarded.close(1.0)
    """

    def __init__(
        self,
        provider: MemoryProvider,
        *,
        timeout: float,
        fast_timeout: float,
        health: ProviderHealth | None = None,
    ) -> None:
        self.provider = provider
        self.health = health or ProviderHealth(provider.name, "external")
        self.timeout = timeout
        self.fast_timeout = fast_timeout
        self._guard = Guard(provider, self.health)
        self._background = Background()

    @property
    def name(self) -> str:
        return self.provider.name

    def call(
        self, hook: str, *args: Any, default: Any = None, fast: bool = False, label: str = "", **kwargs: Any
    ) -> Any:
        """``provider.<hook>(*args, **kwargs)`` with content redacted; ``default`` on a raise, hang or missing hook.

        ``label`` names the call in :attr:`health` (default: the hook; a tool call is labelled ``tool:<name>``).
        """
        fn = getattr(self.provider, hook, None)
        if not callable(fn):
            return default
        content = [redact_content(a) for a in args]
        return self._guard.call(
            label or hook, lambda: fn(*content, **kwargs), default, timeout=self.fast_timeout if fast else self.timeout
        )

    def submit(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """Queue :meth:`call` on the background worker: calls run one at a time, in the order submitted."""
        self._background.submit(lambda: self.call(hook, *args, **kwargs))

    def drain(self, timeout: float) -> bool:
        """Wait for the calls queued so far. False if ``timeout`` passed first."""
        return self._background.drain(timeout)

    def close(self, timeout: float) -> None:
        """Drain the queue, stop the worker, and shut the provider down."""
        self._background.stop(timeout)
        self.call("shutdown")
