"""Shared fixtures. Points tiktoken at the offline encodings when they sit beside the repo."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_SHARED_CACHE = REPO.parent / "shared" / "tiktoken-cache"
if not os.environ.get("TIKTOKEN_CACHE_DIR") and _SHARED_CACHE.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED_CACHE)
os.environ.setdefault("MEM0_TELEMETRY", "False")

from ironmem import MemoryManager


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "memories"
    path.mkdir()
    return path


@pytest.fixture
def manager(home: Path) -> Iterator[MemoryManager]:
    m = MemoryManager(home=home, prefetch_timeout=1.0)
    yield m
    m.close()

# The real local memory servers (Hindsight, OpenViking, the MiniLM embedder): session-scoped, started on first use.
from conftest_servers import embedding_server, hindsight_server, openviking_server  # noqa: F401


# -- PostgreSQL: one throwaway cluster per test session (ironmem.testing.postgres), a fresh database per test ----
@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[object]:
    from ironmem.testing.postgres import PostgresCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    cluster = PostgresCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: object) -> Iterator[str]:
    url = pg_cluster.create_database()  # type: ignore[attr-defined]
    yield url
    pg_cluster.drop_database(url)  # type: ignore[attr-defined]
