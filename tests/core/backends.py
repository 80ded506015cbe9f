"""The few facts a conformance test must ask each backend in its own words (a durability setting, a
lock wait), kept here so the tests themselves stay one text for both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from console.core import Store


def durability_is_full(store: Store) -> bool:
    """Commits wait for the disk again (SQLite synchronous=FULL; PostgreSQL synchronous_commit on)."""
    if store.backend == "postgresql":
        return bool(store.connection.execute("SHOW synchronous_commit").fetchall() == [("on",)])
    return bool(store.connection.execute("PRAGMA synchronous").fetchall() == [(2,)])


def wait_for_locks_at_most(store: Store, milliseconds: int) -> None:
    """Make this store's writes fail fast when another connection holds the write lock."""
    if store.backend == "postgresql":
        store.connection.execute(f"SET lock_timeout = {int(milliseconds)}")
    else:
        store.connection.set_busy_timeout(milliseconds)


def latest_schema_version(store: Store) -> int:
    if store.backend == "postgresql":
        from console.core.pg import SCHEMA_VERSION as PG_SCHEMA_VERSION

        return PG_SCHEMA_VERSION
    from console.core.db import SCHEMA_VERSION

    return SCHEMA_VERSION


@contextmanager
def counting_commits(store: Store) -> Iterator[list[int]]:
    """The write transactions this store commits inside the block (one entry each, filled at the end
    on PostgreSQL, as they happen on SQLite)."""
    commits: list[int] = []
    if store.backend == "postgresql":
        before = store.connection.commits
        yield commits
        commits.extend([1] * (store.connection.commits - before))
        return
    store.connection.set_commit_hook(lambda: commits.append(1) or False)  # False: let each commit go
    try:
        yield commits
    finally:
        store.connection.set_commit_hook(None)
