from __future__ import annotations

from pathlib import Path

import pytest

from console.clock import ManualClock
from console.core import Store
from tests.tui.scenes import START, fill


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def filled(db_path: Path, clock: ManualClock) -> Path:
    fill(db_path, clock)
    return db_path


def reopen(db: Path) -> Store:
    return Store.open(db, check=False)
