from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "inbox.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    s = Store.open(db_path, seed=7)
    try:
        yield s
    finally:
        s.close()
