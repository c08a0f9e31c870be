"""A private event loop on its own thread, for providers whose client is async-only (aiohttp, httpx async).

aiohttp sessions belong to the loop they were made on, while the manager calls provider hooks from several worker
threads (and adapters from the caller's own loop). So a provider keeps ONE loop on a daemon thread and sends every
coroutine there: :meth:`LoopThread.run` from sync code, :meth:`LoopThread.arun` from async code (it awaits without
blocking the caller's loop).

Example:
    >>> import asyncio
    >>> loop = LoopThread("example")
    >>> async def two(): return 2
    >>> loop.run(two, timeout=5)
    2
    >>> loop.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from ..core.errors import ClosedError

__all__ = ["LoopClosedError", "LoopThread"]

T = TypeVar("T")


class LoopClosedError(ClosedError):
    """The provider was shut down; its loop takes no more work."""


class LoopThread:
    """One asyncio loop on a daemon thread, started on first use and stopped by :meth:`close`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise LoopClosedError(f"{self.name}: the provider was shut down")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=main, name=f"ironmem-{self.name}-loop", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def submit(self, factory: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        loop = self._ensure()

        async def call() -> T:
            return await factory()

        return asyncio.run_coroutine_threadsafe(call(), loop)

    def run(self, factory: Callable[[], Awaitable[T]], *, timeout: float | None) -> T:
        """Run ``factory()`` on the loop and wait; ``TimeoutError`` (and the call cancelled) after ``timeout``."""
        future = self.submit(factory)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: no answer within {timeout:g}s") from None

    async def arun(self, factory: Callable[[], Awaitable[T]], *, timeout: float | None) -> T:
        """Await ``factory()`` run on the provider's loop, from any other loop."""
        future = self.submit(factory)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: no answer within {timeout:g}s") from None

    def close(self, cleanup: Callable[[], Awaitable[Any]] | None = None, *, timeout: float = 5.0) -> None:
        """Run ``cleanup()`` on the loop (best effort), then stop the loop and its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        if cleanup is not None:
            try:
                asyncio.run_coroutine_threadsafe(cast(Any, cleanup()), loop).result(timeout)
            except Exception:
                pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout)
        if not loop.is_running():
            loop.close()
