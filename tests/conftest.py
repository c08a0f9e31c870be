"""Shared fixtures. Points tiktoken at the offline encodings when they sit beside the repo."""

from __future__ import annotations

import functools
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

_ENCODING_HELP = (
    "tiktoken's o200k_base encoding cannot be loaded offline: point TIKTOKEN_CACHE_DIR at a folder holding it "
    "(this repo's ../shared/tiktoken-cache, or a copy of ~/.cache of a machine with network) to run this test"
)


@functools.cache
def encoding_available() -> bool:
    """True when tiktoken's o200k_base loads here (cached files or network)."""
    from ironmem.analysis.tokens import TokenCounter
    from ironmem.core.errors import EncodingUnavailableError

    try:
        TokenCounter().count("probe")
    except EncodingUnavailableError:
        return False
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A test that fails only because the token encoding cannot load is reported as skipped, with one reason,
    on a machine without the encodings. CI (``CI=true``) has them and keeps such a failure a failure."""
    report: pytest.TestReport = yield
    if report.passed or report.skipped or os.environ.get("CI"):
        return report
    text = str(report.longrepr or "")
    if ("EncodingUnavailableError" in text or "cannot load the tiktoken encoding" in text) and not encoding_available():
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {_ENCODING_HELP}")
    return report


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
