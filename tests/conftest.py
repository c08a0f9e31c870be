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

from ironmem import MemoryManager  # noqa: E402


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
from conftest_servers import embedding_server, hindsight_server, openviking_server  # noqa: E402,F401
