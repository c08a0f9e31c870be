"""Failure isolation for the external provider: per-hook timeouts, health, and the ordered background worker."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .provider import MemoryProvider

__all__ = ["ProviderHealth", "Guard", "Background"]

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
