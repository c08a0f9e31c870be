"""The writes every shipped provider sends to its backend, kept in order until the backend takes them.

A memory written or a turn synced while the backend is down is not lost: it waits in the provider's
:class:`Outbox` and is sent, before any newer write, as soon as the backend answers again.

- **Ordered.** One queue, sent first in, first out, by one sender at a time; a write that fails stays at the head
  and every later write queues behind it, so turn N reaches the backend before turn N+1.
- **Replayed when the backend answers.** Every write sends what waits before it; any successful call to the
  backend (a recall, a search, a probe) calls :meth:`Outbox.replay_soon`, which sends the queue on a background
  thread without delaying that call; ``on_session_end`` and shutdown send it too (:meth:`Outbox.drain`).
- **Durable.** With a folder (:meth:`Outbox.attach`, ``<home>/<provider>/``), whatever is still queued after a
  failed send is saved as JSON lines (``unsent-<pid>-<id>.jsonl``, replaced atomically), so a restart or a crash
  loses nothing. The owner holds ``<file>.lock`` while it lives; the next process that attaches to the folder
  claims every file whose lock is free (its owner has gone) and puts those writes first. Delivery is at least
  once: a process killed in the middle of a replay may send a write twice.
- **Bounded.** At most ``max_pending`` writes wait; when one more comes, the oldest is dropped, logged as an
  error, counted (``dropped`` in ``status``) and appended to ``<folder>/dropped.jsonl`` so it can still be
  recovered by hand. A write the backend refuses for good (``rejected(exc)``, e.g. HTTP 400) is dropped and
  recorded the same way instead of blocking the queue forever.

Writes are plain JSON records (``{"op": ..., ...}``); the provider's ``send(record)`` performs one. Nothing but
the record is kept, so what is saved is exactly what is replayed.

Example:
    >>> sent = []
    >>> box = Outbox("demo", sent.append)
    >>> box.write({"op": "note", "text": "likes tea"})
    >>> sent, box.pending
    ([{'op': 'note', 'text': 'likes tea'}], 0)
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.builtin.store import HermesLock
from ..core.errors import ProviderUnavailableError
from ..core.fileio import write_atomic

__all__ = ["DEFAULT_MAX_PENDING", "Outbox", "WritesQueuedError"]

log = logging.getLogger(__name__)

#: Writes kept while the backend does not take them (per provider instance).
DEFAULT_MAX_PENDING = 200

Record = dict[str, Any]


class WritesQueuedError(ProviderUnavailableError):
    """A write could not be sent now; it is queued with the others and sent when the backend answers again.

    The message is the backend's failure followed by how many writes wait. ``retry_after`` is the wait a rate
    limited service asked for (None otherwise), so a tool result can pass it on.
    """

    def __init__(self, message: str, *, pending: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.pending = pending
        self.retry_after = retry_after


def _never(exc: BaseException) -> bool:
    return False


class Outbox:
    """An ordered, bounded, durable queue of one provider's writes to its backend.

    Args:
        label: names the provider in messages and logs.
        send: performs one write (a JSON record); raises when the backend does not take it.
        max_pending: how many writes may wait; the oldest is dropped (and recorded) beyond that.
        rejected: True for a failure that will never succeed for this record (the backend refused it for good):
            the record is dropped and recorded instead of blocking the queue.

    Example:
        >>> def down(record): raise ConnectionError("refused")
        >>> box = Outbox("demo", down)
        >>> try:
        ...     box.write({"op": "turn", "text": "hi"})
        ... except WritesQueuedError as exc:
        ...     print(exc)
        refused; 1 write(s) wait and are sent, in order, when the backend answers again
    """

    def __init__(self, label: str, send: Callable[[Record], Any], *, max_pending: int = DEFAULT_MAX_PENDING,
                 rejected: Callable[[BaseException], bool] = _never) -> None:
        self.label = label
        self.max_pending = max_pending
        self._send = send
        self._rejected = rejected
        self._queue: collections.deque[Record] = collections.deque()
        self._queue_lock = threading.Lock()  # guards _queue (short holds)
        self._send_lock = threading.Lock()  # one sender at a time, so the queue goes out in order
        self._replayer: threading.Thread | None = None
        self.dropped = 0
        self.sent = 0
        self.last_error = ""
        self._folder: Path | None = None
        self._file: Path | None = None
        self._lock_stack: contextlib.ExitStack | None = None
        self._closed = False

    # -- state ------------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """How many writes wait for the backend."""
        return len(self._queue)

    def snapshot(self) -> dict[str, Any]:
        """What ``status`` shows: ``pending`` always; ``dropped``, ``last_error`` and the saved file when set."""
        out: dict[str, Any] = {"pending": self.pending}
        if self.dropped:
            out["dropped"] = self.dropped
            if self._folder is not None:
                out["dropped_file"] = str(self._folder / "dropped.jsonl")
        if self.pending and self.last_error:
            out["last_error"] = self.last_error
        if self.pending and self._file is not None and self._file.exists():
            out["saved_to"] = str(self._file)
        return out

    # -- writing ----------------------------------------------------------------------------------
    def write(self, record: Record) -> None:
        """Queue ``record`` behind what waits and send the queue in order.

        Raises :class:`WritesQueuedError` when something (this write or an older one) stays queued.
        """
        with self._queue_lock:
            self._closed = False  # a provider may be opened again after a shutdown
            self._add(record)
        self.drain()

    def drain(self) -> None:
        """Send what waits, in order; raises :class:`WritesQueuedError` at the first write the backend does not
        take (it and the rest stay queued, saved when a folder is attached)."""
        with self._send_lock:
            self._drain_locked()

    def replay_soon(self) -> None:
        """The backend answered: send what waits on a background thread (returns at once; no-op when empty)."""
        if not self._queue or self._closed or self._send_lock.locked():  # empty, or being sent right now
            return
        with self._queue_lock:
            if self._replayer is not None and self._replayer.is_alive():
                return
            self._replayer = threading.Thread(target=self._replay, name=f"ironmem-{self.label}-replay", daemon=True)
            self._replayer.start()

    def _replay(self) -> None:
        if not self._send_lock.acquire(blocking=False):
            return  # a write or a session end is sending the queue right now
        try:
            self._drain_locked()
        except WritesQueuedError:
            pass  # logged; the next write or session end reports it to the manager
        finally:
            self._send_lock.release()

    def _drain_locked(self) -> None:
        failure: BaseException | None = None
        try:
            while True:
                with self._queue_lock:
                    if not self._queue:
                        break
                    record = self._queue[0]
                try:
                    self._send(record)
                except Exception as exc:
                    if self._rejected(exc):
                        with self._queue_lock:
                            if self._queue and self._queue[0] is record:
                                self._queue.popleft()
                        self._drop(record, f"the backend refused it: {exc}")
                        failure = exc
                        continue
                    self.last_error = str(exc)
                    failure = exc
                    break
                with self._queue_lock:
                    if self._queue and self._queue[0] is record:
                        self._queue.popleft()
                self.sent += 1
        finally:
            self._save()
        if self._queue and failure is not None:
            count = len(self._queue)
            log.warning("%s: %d write(s) wait for the backend: %s", self.label, count, failure)
            raise WritesQueuedError(
                f"{failure}; {count} write(s) wait and are sent, in order, when the backend answers "
                "again", pending=count, retry_after=getattr(failure, "retry_after", None)) from failure
        if failure is not None:  # the only failures were writes refused for good: say so once
            raise ProviderUnavailableError(f"{self.label}: a write was refused and dropped ({failure}); "
                                           f"it is kept in {self._dropped_where()}") from failure

    def _add(self, record: Record, *, front: bool = False) -> None:
        """Queue ``record`` (called with ``_queue_lock`` held); beyond ``max_pending``, drop the oldest."""
        if front:
            self._queue.appendleft(record)
        else:
            self._queue.append(record)
        while len(self._queue) > self.max_pending:  # the oldest goes: the newest writes are the likeliest current
            self._drop(self._queue.popleft(), f"more than {self.max_pending} writes waited for the backend")

    def _drop(self, record: Record, why: str) -> None:
        self.dropped += 1
        where = self._dropped_where()
        log.error("%s: dropped a write (%s, %d chars) because %s; kept in %s", self.label, record.get("op", "?"),
                  len(json.dumps(record, ensure_ascii=False)), why, where)
        if self._folder is None:
            return
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            line = json.dumps({"dropped_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "why": why,
                               "record": record}, ensure_ascii=False)
            fd = os.open(self._folder / "dropped.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            log.error("%s: could not record the dropped write in %s: %s", self.label, where, exc)

    def _dropped_where(self) -> str:
        return str(self._folder / "dropped.jsonl") if self._folder is not None else "the log only (no memory home)"

    # -- durability -------------------------------------------------------------------------------
    def attach(self, folder: str | os.PathLike[str]) -> int:
        """Save what stays queued under ``folder`` from now on, and queue first the writes that earlier processes
        left there (their files' locks are free). Returns how many were claimed. Only the first call counts."""
        with self._queue_lock:
            if self._folder is not None or self._closed:
                return 0
            self._folder = Path(folder)
            self._file = self._folder / f"unsent-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        claimed = self._claim()
        if claimed:
            with self._queue_lock:
                for record in reversed(claimed):
                    self._add(record, front=True)
            log.info("%s: %d write(s) saved by an earlier run queued for sending", self.label, len(claimed))
            with self._send_lock:
                self._save()
        return len(claimed)

    def _claim(self) -> list[Record]:
        assert self._folder is not None and self._file is not None
        if not self._folder.is_dir():
            return []
        claimed: list[Record] = []
        for path in sorted(self._folder.glob("unsent-*.jsonl"), key=_age):
            if path == self._file:
                continue
            lock = HermesLock(path)
            try:
                with lock.try_hold():  # held by a live owner: not ours to take
                    mine = path.with_name(f"claimed-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl")
                    try:
                        os.rename(path, mine)
                    except OSError:
                        continue  # another process got there first
                    claimed.extend(self._read(mine))
                    mine.unlink(missing_ok=True)
            except (TimeoutError, OSError):
                continue
            lock.path.unlink(missing_ok=True)
        return claimed

    def _read(self, path: Path) -> list[Record]:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            log.error("%s: cannot read saved writes %s: %s", self.label, path, exc)
            return []
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                log.error("%s: skipped a damaged line in %s", self.label, path)
                continue
            if isinstance(record, dict):
                out.append(record)
        return out

    def _save(self) -> None:
        """Mirror the queue in this outbox's file (called with ``_send_lock`` held); no file when nothing waits."""
        if self._file is None:
            return
        with self._queue_lock:
            records = list(self._queue)
        try:
            if not records:
                self._file.unlink(missing_ok=True)
                return
            self._hold_lock()
            write_atomic(self._file, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode())
        except (OSError, TimeoutError) as exc:
            log.error("%s: could not save %d queued write(s) to %s (kept in memory only): %s", self.label,
                      len(records), self._file, exc)

    def _hold_lock(self) -> None:
        """Hold ``<file>.lock`` for as long as this outbox lives, so no other process claims its file."""
        if self._lock_stack is None and self._file is not None:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            stack = contextlib.ExitStack()
            stack.enter_context(HermesLock(self._file).hold(timeout=5.0))
            self._lock_stack = stack

    def close(self) -> None:
        """Try to send what waits; what the backend does not take stays saved for the next process (or, with no
        folder attached, is dropped and recorded), and the file's lock is released. Idempotent; a later
        :meth:`write` (a provider opened again) starts over."""
        if self._closed:
            return
        with contextlib.suppress(WritesQueuedError, ProviderUnavailableError):
            self.drain()
        with self._send_lock, self._queue_lock:
            self._closed = True
            left = list(self._queue) if self._folder is None else []
            if left:
                self._queue.clear()
            stack, self._lock_stack = self._lock_stack, None
        for record in left:
            self._drop(record, "the provider shut down before the backend answered, and no memory home was given")
        if self._file is not None and self._file.exists():
            log.warning("%s: %d write(s) could not be sent; saved to %s and sent by the next run on this home",
                        self.label, self.pending, self._file)
        if stack is not None:
            stack.close()
            if self._file is not None and not self._file.exists():
                HermesLock(self._file).path.unlink(missing_ok=True)


def _age(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
