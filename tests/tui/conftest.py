from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.core import Store
from tests.tui.scenes import START, fill


async def wait_until(pilot: Pilot[None], condition: Callable[[], bool], *, timeout: float = 60.0,
                     what: str = "condition") -> None:
    """Let the app process messages until condition() holds; fail after a bounded time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def filled(db_path: Path, clock: ManualClock) -> Path:
    fill(db_path, clock)
    return db_path


def reopen(db: Path) -> Store:
    return Store.open(db, check=False)
