"""The outbox every shipped provider sends its writes through (``ironmem/providers/_outbox.py``): ordered, bounded
with a record of what was dropped, saved on disk while the backend is down (also across a crash, claimed by the
next process), and replayed when the backend answers again.

The backend here is a small in-process one that can be switched off; the providers' own tests run the same outbox
against real servers (``tests/servers.py``: the outage scenarios).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ironmem.core.errors import ProviderUnavailableError
from ironmem.providers._base import refused_for_good
from ironmem.providers._outbox import Outbox, WritesQueuedError

ROOT = Path(__file__).resolve().parent.parent


class Backend:
    """Takes records while ``up``; refuses a record whose text is ``"bad"`` with HTTP 400, like a server would."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.up = True
        self.delay = delay
        self.received: list[str] = []
        self.calls = 0

    def send(self, record: dict[str, Any]) -> None:
        self.calls += 1
        time.sleep(self.delay)
        if not self.up:
            raise ConnectionRefusedError("backend down")
        if record["text"] == "bad":
            error = ValueError("HTTP 400: content must not be 'bad'")
            error.status = 400  # type: ignore[attr-defined]
            raise error
        self.received.append(record["text"])


def _write(box: Outbox, text: str) -> None:
    try:
        box.write({"op": "note", "text": text})
    except WritesQueuedError:
        pass


def test_order_is_kept_through_an_outage_and_the_queue_goes_out_when_the_backend_answers() -> None:
    backend = Backend()
    box = Outbox("demo", backend.send)
    box.write({"op": "note", "text": "one"})
    backend.up = False
    with pytest.raises(WritesQueuedError, match="backend down; 1 write") as info:
        box.write({"op": "note", "text": "two"})
    assert info.value.pending == 1
    _write(box, "three")
    assert box.pending == 2 and box.snapshot() == {"pending": 2, "last_error": "backend down"}
    backend.up = True
    box.write({"op": "note", "text": "four"})  # the older writes go first
    assert backend.received == ["one", "two", "three", "four"] and box.snapshot() == {"pending": 0}


def test_bounded_the_oldest_is_dropped_and_kept_in_dropped_jsonl(tmp_path: Path) -> None:
    backend = Backend()
    box = Outbox("demo", backend.send, max_pending=3)
    box.attach(tmp_path / "demo")
    backend.up = False
    for i in range(5):
        _write(box, f"w{i}")
    snap = box.snapshot()
    assert snap["pending"] == 3 and snap["dropped"] == 2 and snap["dropped_file"].endswith("dropped.jsonl")
    dropped = [json.loads(line) for line in (tmp_path / "demo" / "dropped.jsonl").read_text().splitlines()]
    assert [d["record"]["text"] for d in dropped] == ["w0", "w1"] and "more than 3 writes" in dropped[0]["why"]
    backend.up = True
    box.drain()
    assert backend.received == ["w2", "w3", "w4"]
    box.close()


def test_a_write_refused_for_good_is_dropped_and_recorded_and_does_not_block_the_queue(tmp_path: Path) -> None:
    backend = Backend()
    box = Outbox("demo", backend.send, rejected=refused_for_good)
    box.attach(tmp_path / "demo")
    backend.up = False
    for text in ("before", "bad", "after"):
        _write(box, text)
    backend.up = True
    with pytest.raises(ProviderUnavailableError, match="refused and dropped"):
        box.drain()
    assert backend.received == ["before", "after"] and box.pending == 0
    [line] = (tmp_path / "demo" / "dropped.jsonl").read_text().splitlines()
    assert json.loads(line)["record"]["text"] == "bad" and "HTTP 400" in json.loads(line)["why"]


def test_without_a_home_writes_left_at_shutdown_are_dropped_with_a_record_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    backend = Backend()
    backend.up = False
    box = Outbox("demo", backend.send)
    _write(box, "lost")
    box.close()
    assert box.dropped == 1 and "dropped a write (note" in caplog.text and "no memory home" in caplog.text


def test_replay_soon_sends_in_the_background_without_delaying_the_caller() -> None:
    backend = Backend(delay=0.2)
    box = Outbox("demo", backend.send)
    backend.up = False
    _write(box, "a")
    _write(box, "b")
    backend.up = True
    started = time.monotonic()
    box.replay_soon()
    box.replay_soon()  # one replayer at a time
    assert time.monotonic() - started < 0.1
    deadline = time.monotonic() + 5
    while box.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.received == ["a", "b"]
    box.write({"op": "note", "text": "c"})
    assert backend.received == ["a", "b", "c"]


def test_writes_from_many_threads_all_arrive_once() -> None:
    backend = Backend()
    box = Outbox("demo", backend.send, max_pending=1000)
    backend.up = False
    threads = [threading.Thread(target=_write, args=(box, f"t{i}")) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    backend.up = True
    box.drain()
    assert sorted(backend.received) == sorted(f"t{i}" for i in range(20)) and box.pending == 0


_WRITER = textwrap.dedent("""
    import sys, time
    from ironmem.providers._outbox import Outbox, WritesQueuedError

    def down(record):
        raise ConnectionRefusedError("backend down")

    box = Outbox("demo", down)
    box.attach(sys.argv[1])
    for text in ("first", "second", "third"):
        try:
            box.write({"op": "note", "text": text})
        except WritesQueuedError:
            pass
    print("queued", flush=True)
    time.sleep(120)  # killed before it could shut down
""")


def test_writes_survive_a_crash_and_only_a_dead_owners_file_is_claimed(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "demo"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(folder)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "queued"
        [saved] = folder.glob("unsent-*.jsonl")
        assert [json.loads(line)["text"] for line in saved.read_text().splitlines()] == ["first", "second", "third"]
        alive = Outbox("demo", Backend().send)
        assert alive.attach(folder) == 0  # its owner is alive: not ours
        alive.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    backend = Backend()
    box = Outbox("demo", backend.send)
    assert box.attach(folder) == 3
    box.write({"op": "note", "text": "fourth"})
    assert backend.received == ["first", "second", "third", "fourth"]
    box.close()
    assert not list(folder.glob("*.jsonl"))
