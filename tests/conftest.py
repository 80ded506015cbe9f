from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store
from tests.pg_server import PostgresServer, drop_schema, start_server


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


# -- PostgreSQL: one throwaway server per test session, one fresh schema (inbox) per test ---------------

@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty inbox (its own schema) on the session's server; dropped afterwards."""
    url = postgres_server.inbox_url()
    yield url
    drop_schema(postgres_server, url)


BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def inbox_target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """Where a conformance test's inbox lives: a SQLite file, then a PostgreSQL schema."""
    if request.param == "sqlite":
        return str(db_path)
    url: str = request.getfixturevalue("postgres_url")
    return url
