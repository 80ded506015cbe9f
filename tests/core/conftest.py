"""The core's behavioural tests are its conformance suite: every test that takes `store` (or
`inbox_target`) runs once on a SQLite file and once on a PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store


@pytest.fixture
def store(inbox_target: str) -> Iterator[Store]:
    s = Store.open(inbox_target, seed=7)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sqlite_store(db_path: Path) -> Iterator[Store]:
    """For the facts only SQLite has (its query planner's words, its pragmas)."""
    s = Store.open(db_path, seed=7)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    """For the facts only PostgreSQL has (its plans, NOTIFY, schemas)."""
    s = Store.open(postgres_url, seed=7)
    try:
        yield s
    finally:
        s.close()
