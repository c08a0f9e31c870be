"""pytest fixtures for the real local servers (see tests/servers.py); imported by the provider test modules.

Session-scoped: one embedding server, one Hindsight server and one OpenViking server for the whole run, each
started on first use and stopped at the end. A server that cannot run here skips its tests with the reason
(venv missing: ``bash tools/install_servers.sh``). Tests that kill or slow a server start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from servers import EmbeddingServer, HindsightServer, OpenVikingServer, ServerUnavailable

_failed: dict[str, str] = {}


def _start(kind: str, factory: type, *args: object) -> Iterator[object]:
    if kind in _failed:
        pytest.skip(_failed[kind])
    server = factory(*args)
    try:
        server.__enter__()
    except ServerUnavailable as exc:
        _failed[kind] = f"{kind} server unavailable: {exc}"
        pytest.skip(_failed[kind])
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(scope="session")
def embedding_server() -> Iterator[EmbeddingServer]:
    yield from _start("embedding", EmbeddingServer)  # type: ignore[misc]


@pytest.fixture(scope="session")
def hindsight_server(embedding_server: EmbeddingServer) -> Iterator[HindsightServer]:
    yield from _start("hindsight", HindsightServer, embedding_server)  # type: ignore[misc]


@pytest.fixture(scope="session")
def openviking_server(embedding_server: EmbeddingServer) -> Iterator[OpenVikingServer]:
    yield from _start("openviking", OpenVikingServer, embedding_server)  # type: ignore[misc]
