"""The core's behavioural tests are its conformance suite: every test that takes `store` (or
`inbox_target`) runs once on a SQLite file and once on a PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store


def opened(target: str | Path) -> Iterator[Store]:
    with Store.open(target, seed=7) as store:
        yield store


@pytest.fixture
def store(inbox_target: str) -> Iterator[Store]:
    yield from opened(inbox_target)


@pytest.fixture
def sqlite_store(db_path: Path) -> Iterator[Store]:
    """For the facts only SQLite has (its query planner's words, its pragmas)."""
    yield from opened(db_path)


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    """For the facts only PostgreSQL has (its plans, NOTIFY, schemas)."""
    yield from opened(postgres_url)
