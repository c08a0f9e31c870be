"""Failure isolation for the external provider: per-hook timeouts, health, the ordered background worker, and
:class:`GuardedProvider`, the one way the rest of ironmem calls into the external provider."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

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
    """What ``status()`` reports for one provider: the present truth, as the latest calls into it showed it.

    The rule: a call that fails makes the provider ``degraded`` (``failing`` keeps each failed hook with its
    reason, ``reason`` the latest). A later successful call that shows the backend answers makes it ``active``
    again and clears every failing hook, whichever it was: a recall (``prefetch``) or a ``probe`` (the calls whose
    job is to reach the backend), or any hook that has failed before (it has shown that it depends on the
    backend). Any other successful call clears only its own hook: a hook that never failed may be a no-op for
    this provider (the contract's default for the optional hooks), and a tool call returns its failures as a JSON
    result (``tool:<name>`` hooks never prove anything). The last failure stays visible (``last_failure``, with the
    time it was recovered from) and ``failures`` counts them all. Writes that failed during the outage are not
    forgotten: the shipped providers keep them in their outbox (``writes`` in ``status``) and send them once the
    backend answers.

    Example:
        >>> health = ProviderHealth("demo", "external")
        >>> health.fail("on_memory_write", "on_memory_write raised ConnectionError: refused")
        >>> health.ok("on_turn_start")  # a hook that never failed may be a no-op: it proves nothing
        >>> health.state, health.reason
        ('degraded', 'on_memory_write raised ConnectionError: refused')
        >>> health.ok("prefetch")  # the backend answered a recall: it is back
        >>> health.state, health.failing, health.failures
        ('active', {}, 1)
    """

    #: Hooks whose success shows that the backend answers, even if they never failed (see the class docstring).
    BACKEND_HOOKS: ClassVar[frozenset[str]] = frozenset({"prefetch", "probe"})

    name: str
    kind: str  # "builtin" | "external"
    reason: str = ""
    failures: int = 0
    last_failure_at: float | None = None
    failing: dict[str, str] = field(default_factory=dict)  # hook -> why it failed, since the provider last answered
    last_failure: dict[str, Any] | None = None  # {"hook", "reason", "at", "recovered_at"}
    _failed_before: set[str] = field(default_factory=set, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def state(self) -> str:
        return "degraded" if self.failing else "active"

    def fail(self, hook: str, reason: str) -> None:
        """A call of ``hook`` failed (raised, timed out, or was skipped behind a hung call)."""
        now = time.time()
        with self._lock:
            self.failing[hook] = reason
            self._failed_before.add(hook)
            self.reason = reason
            self.failures += 1
            self.last_failure_at = now
            self.last_failure = {"hook": hook, "reason": reason, "at": _iso(now)}

    def ok(self, hook: str) -> None:
        """A call of ``hook`` succeeded: it clears itself, and every failing hook when it shows that the backend
        answers (:attr:`BACKEND_HOOKS`, or a hook other than a tool call that has failed before)."""
        with self._lock:
            self.failing.pop(hook, None)
            answered = hook in self.BACKEND_HOOKS or (hook in self._failed_before and not hook.startswith("tool:"))
            if self.failing and not answered:
                return
            if self.failures and self.last_failure is not None and "recovered_at" not in self.last_failure:
                self.last_failure["recovered_at"] = _iso(time.time())
            self.failing.clear()

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {"name": self.name, "kind": self.kind, "state": self.state}
            if self.failing:
                out["reason"] = self.reason
                out["failing_hooks"] = dict(self.failing)
            if self.failures:
                out["failures"] = self.failures
                if not self.failing and self.last_failure is not None:
                    out["last_failure"] = dict(self.last_failure)
            return out


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


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
