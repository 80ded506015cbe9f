from __future__ import annotations

from pathlib import Path

import pytest

from console.clock import ManualClock
from console.core import Store
from tests.support import pilot_until
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


# The name the console's tests used before tests/support.py; kept while branches written against it merge.
# New tests import pilot_until from tests.support.
wait_until = pilot_until
