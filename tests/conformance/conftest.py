"""Fixtures of the Hermes conformance suite (the driver is in hermes_driver.py; see README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .hermes_driver import HermesStyleDriver


@pytest.fixture(params=["refuse", "archive"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HermesStyleDriver]:
    """Hermes's fixture: limits 500 (memory) and 300 (user) on an empty folder; every test runs with
    ``overflow="refuse"`` (Hermes's behaviour) and with ironmem's default ``"archive"`` (README: difference 10)."""
    driver = HermesStyleDriver(tmp_path, memory_char_limit=500, user_char_limit=300, overflow=request.param)
    yield driver
    driver.close()


@pytest.fixture()
def make_store(tmp_path: Path) -> Iterator[Any]:
    made: list[HermesStyleDriver] = []

    def factory(folder: Path | None = None, **kwargs: Any) -> HermesStyleDriver:
        driver = HermesStyleDriver(folder or tmp_path, **kwargs)
        made.append(driver)
        return driver

    yield factory
    for driver in made:
        driver.close()
