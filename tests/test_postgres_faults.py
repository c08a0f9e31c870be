"""PostgreSQL faults: a backend killed mid-transaction, a server restart mid-session, a server that stays down.

The agent's turn either goes on (the write is retried on a new connection and lands exactly once) or fails with
a clear :class:`~ironmem.core.errors.StorageError`; no write is ever half-applied.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ironmem import MemoryManager
from ironmem.core.builtin import postgres as pg_module
from ironmem.core.builtin.postgres import PostgresStorage
from ironmem.core.builtin.store import FileState
from ironmem.core.errors import IronMemError, StorageError


def _ironmem_backends(url: str, state: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'ironmem' "
            "AND state = %s", (state,)).fetchall()
    return [r[0] for r in rows]


def test_backend_terminated_mid_transaction_retries_and_lands_once(pg_url: str) -> None:
    storage = PostgresStorage(pg_url, retry_for=10)
    try:
        storage.transact("", ["memory"], lambda cur: {"memory": ["before"]})
        inside = threading.Event()
        proceed = threading.Event()
        calls: list[int] = []

        def change(current: dict[str, FileState]) -> dict[str, list[str]]:
            calls.append(1)
            if len(calls) == 1:  # first attempt: hold the transaction open until the backend is killed
                inside.set()
                assert proceed.wait(10)
            return {"memory": list(current["memory"].entries) + ["after"], "user": ["profile"]}

        result: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: result.update(storage.transact("", ["memory", "user"], change)))
        worker.start()
        assert inside.wait(10)
        victims = _ironmem_backends(pg_url, "idle in transaction")
        assert len(victims) == 1
        with psycopg.connect(pg_url, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (victims[0],)).fetchone()[0]
        # Nothing of the first attempt is visible: it was one transaction and it died.
        assert storage.read("", "memory").entries == ("before",) and storage.read("", "user").entries == ()
        proceed.set()
        worker.join(20)
        assert len(calls) == 2  # retried once, on a new connection
        assert storage.read("", "memory").entries == ("before", "after")
        assert storage.read("", "user").entries == ("profile",)
        assert [r["targets"] for r in storage.history()] == [["memory"], ["memory", "user"]]
    finally:
        storage.close()


def test_a_write_that_committed_is_not_applied_again_on_retry(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry of a write whose COMMIT landed (but whose answer was lost) finds its id in the log."""
    storage = PostgresStorage(pg_url)
    try:
        fixed = uuid.uuid4()
        monkeypatch.setattr(pg_module.uuid, "uuid4", lambda: fixed)
        storage.transact("", ["memory"], lambda cur: {"memory": ["once"]}, record={"n": 1})
        # The same write id again, as a retry after a lost connection would send it.
        out = storage.transact("", ["memory"], lambda cur: {"memory": list(cur["memory"].entries) + ["twice"]})
        assert out["memory"].entries == ("once",)
        assert storage.read("", "memory").entries == ("once",)
        assert len(storage.history()) == 1
    finally:
        storage.close()


def test_server_restart_mid_session(pg_cluster: Any, pg_url: str, home: Path) -> None:
    with MemoryManager(home=home, storage=pg_url) as manager:
        session = manager.start_session("s1", user_id="ada")
        frozen = session.system_prompt_block()
        assert json.loads(session.handle_tool_call(
            "memory", {"action": "add", "target": "user", "content": "Name: Ada"}))["success"]
        session.sync_turn("we planned the kestrel release", "noted")
        pg_cluster.restart(mode="fast")  # every pooled connection is now dead
        fenced = session.prefetch("what about the kestrel release?").fenced()
        assert "Name: Ada" in fenced and "kestrel release" not in fenced  # own session's turns are not recalled
        r = json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory",
                                                           "content": "Release train: Tuesdays"}))
        assert r["success"], r
        session.sync_turn("and after the restart?", "still here")
        assert manager.health("builtin").to_dict()["state"] == "active"
        assert session.system_prompt_block() == frozen
        assert manager.builtin.index.turn_count("s1") == 2
        assert [row["targets"] for row in manager.builtin.storage.history()] == [["user"], ["memory"]]
        other = manager.start_session("s2", user_id="ada")
        assert "kestrel release" in other.prefetch("the kestrel release").fenced()


def test_server_down_fails_with_a_clear_error_and_writes_nothing(pg_cluster: Any, pg_url: str, home: Path) -> None:
    storage = PostgresStorage(pg_url, retry_for=1.5, connect_timeout=1)
    manager = MemoryManager(home=home, storage=storage)
    try:
        session = manager.start_session("s1")
        assert json.loads(session.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "kept"}))["success"]
        pg_cluster.stop_server(mode="immediate")  # like a crash
        try:
            r = json.loads(session.handle_tool_call(
                "memory", {"action": "add", "target": "memory", "content": "lost?"}))
            assert r["success"] is False
            assert "unreachable" in r["error"] and "Nothing was written" in r["error"]
            session.sync_turn("hello", "world")  # the turn goes on; the failure is recorded
            health = manager.health("builtin").to_dict()
            assert health["state"] != "active" and "unreachable" in json.dumps(health)
            with pytest.raises(IronMemError, match="unreachable"):
                storage.read("", "memory")
            with pytest.raises(StorageError):
                session.prefetch("anything")  # the live delta needs the database: a clear error, not a hang
        finally:
            pg_cluster.start_server()
        assert storage.read("", "memory").entries == ("kept",)
        assert manager.builtin.index.turn_count() == 0
        assert json.loads(session.handle_tool_call(
            "memory", {"action": "add", "target": "memory", "content": "after"}))["success"]
        assert [r["ops"][0]["content"] for r in storage.history()] == ["kept", "after"]
    finally:
        manager.close()


def test_migrations_are_idempotent_and_versioned(pg_url: str) -> None:
    a = PostgresStorage(pg_url)
    b = PostgresStorage(pg_url)  # a second start: nothing to do
    try:
        assert a.schema_version() == pg_module.SCHEMA_VERSION
        b.migrate()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute("SELECT version FROM ironmem.migrations ORDER BY version").fetchall()
            assert [r[0] for r in rows] == [v for v, _, _ in pg_module.MIGRATIONS]
            conn.execute("INSERT INTO ironmem.migrations(version, name) VALUES (999, 'from the future')")
        with pytest.raises(StorageError, match="newer than this ironmem"):
            b.migrate()
    finally:
        a.close()
        b.close()


def test_separate_schemas_are_separate_memories(pg_url: str) -> None:
    a = PostgresStorage(pg_url + "?ironmem_schema=team_a")
    b = PostgresStorage(pg_url, schema="team_b")
    try:
        a.transact("", ["user"], lambda cur: {"user": ["A"]})
        assert b.read("", "user").entries == () and a.read("", "user").entries == ("A",)
        with pytest.raises(StorageError, match="schema name"):
            PostgresStorage(pg_url, schema="bad; DROP TABLE x")
    finally:
        a.close()
        b.close()
