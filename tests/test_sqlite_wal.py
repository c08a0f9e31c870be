"""The switch to WAL mode waits for a writer that holds the new database, on every SQLite driver ironmem uses.

Processes that open a new database at the same moment race for ``PRAGMA journal_mode=WAL``; SQLite answers
"database is locked" at once (its busy timeout does not cover the switch). ``enable_wal`` retries.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from types import ModuleType

import pytest

from ironmem.core.builtin.index import enable_wal


def _drivers() -> list[ModuleType]:
    found = []
    for name in ("sqlite3", "sqlean"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


@pytest.mark.parametrize("driver", _drivers(), ids=lambda d: d.__name__)
def test_the_switch_waits_for_a_writer_that_holds_the_database(tmp_path: Path, driver: ModuleType) -> None:
    path = str(tmp_path / "new.db")
    holder = driver.connect(path, check_same_thread=False, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE t (x)")
    opener = driver.connect(path, timeout=0.05)
    with pytest.raises(driver.OperationalError, match="locked"):   # what the plain statement does meanwhile
        opener.execute("PRAGMA journal_mode=WAL")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    enable_wal(opener, timeout=10)
    release.join()
    assert opener.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert opener.execute("SELECT count(*) FROM t").fetchone()[0] == 0    # the holder's table is there
    holder.close()
    opener.close()


def test_other_errors_are_not_retried(tmp_path: Path) -> None:
    class Broken:
        calls = 0

        def execute(self, sql: str) -> None:
            Broken.calls += 1
            raise ValueError("database is locked")     # not an OperationalError: not SQLite's lock

    with pytest.raises(ValueError):
        enable_wal(Broken())
    assert Broken.calls == 1
