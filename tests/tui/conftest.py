from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from console.clock import ManualClock
from console.core import Store
from tests.support import pilot_until
from tests.tui.scenes import START, fill


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture(scope="session")
def filled_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The filled scene built once a session (a worker): migrating a new inbox and filling it took ~0.1 s of CPU,
    paid again by each of the ~270 tests that start from it."""
    db = tmp_path_factory.mktemp("filled-template") / "inbox.db"
    fill(db, ManualClock(START))
    return db


@pytest.fixture
def filled(db_path: Path, clock: ManualClock, filled_template: Path) -> Path:
    """The filled scene in this test's own inbox: a copy of the session's (fill is deterministic on a clock at
    START; a test whose clock was moved first gets it filled afresh)."""
    if clock.now() != START:
        fill(db_path, clock)
        return db_path
    for part in filled_template.parent.iterdir():  # the inbox and any file SQLite keeps beside it
        shutil.copy(part, db_path.parent / part.name.replace(filled_template.name, db_path.name, 1))
    return db_path


def reopen(db: Path) -> Store:
    return Store.open(db, check=False)


# The name the console's tests used before tests/support.py; kept while branches written against it merge.
# New tests import pilot_until from tests.support.
wait_until = pilot_until
