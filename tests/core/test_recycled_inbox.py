"""A recycled PostgreSQL inbox (tests/pg_server.py InboxPool, behind the `inbox_target` and `store` fixtures) is
what a fresh migration gives: the same definitions, the same rows (none but what the migrations write), the same
sequences, no planner statistics of an earlier test; and a schema a test changed or still uses is not reused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from console.clock import ManualClock
from console.core import Store
from tests.pg_server import InboxPool, PostgresServer, schema_of, schema_shape, sequences_of, tables_of
from tests.tui.scenes import START, fill


@pytest.fixture
def pool(postgres_server: PostgresServer) -> Iterator[InboxPool]:
    own = InboxPool(postgres_server)
    try:
        yield own
    finally:
        own.close()


def rows(conn: Any, schema: str, table: str) -> list[tuple[Any, ...]]:
    return conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1').fetchall()


def planner_facts(conn: Any, schema: str) -> list[tuple[Any, ...]]:
    """What the planner reads of each relation: its counts, its statistics, its size on disk (TOAST included)."""
    return conn.execute("SELECT c.relname, c.relpages, c.reltuples, c.relallvisible, (SELECT count(*) FROM "
                        "pg_statistic s WHERE s.starelid = c.oid), pg_relation_size(c.oid), "
                        "coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0) FROM pg_class c "
                        "WHERE c.relnamespace = %s::regnamespace ORDER BY 1", (f'"{schema}"',)).fetchall()


def test_a_recycled_inbox_is_a_fresh_migration(postgres_server: PostgresServer, pool: InboxPool,
                                               tmp_path: Path) -> None:
    url = pool.take()
    schema = schema_of(url)
    fill(url, ManualClock(START), other_holds_lease=False)  # type: ignore[arg-type]  # events, runs, outbox, approvals
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".inbox')  # statistics a plan of the next test must not see
        used = [table for table in tables_of(conn, schema) if rows(conn, schema, table)]
        (before,) = rows(conn, schema, "inbox_identity")
    assert len(used) >= 6, used  # the test did fill the inbox

    pool.give_back(url)  # the test's sessions all closed
    assert pool.spare == [url]  # kept, not dropped
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("ANALYZE")  # another test's, of the whole database: it reaches the spare and the pristine
    assert pool.take() == url

    fresh = schema_of(postgres_server.inbox_url())
    Store.open(f"{postgres_server.url}?schema={fresh}").close()
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        assert schema_shape(conn, schema) == schema_shape(conn, fresh)
        for table in tables_of(conn, fresh):
            if table != "inbox_identity":
                assert rows(conn, schema, table) == rows(conn, fresh, table), table
        # Each inbox its own identity, as each migration draws one.
        identities = [rows(conn, name, "inbox_identity") for name in (schema, fresh, pool.pristine)]
        assert all(len(found) == 1 and found[0][0] == 1 and len(found[0][1]) == 16 for found in identities)
        assert len({found[0][1] for found in identities} | {before[1]}) == 4
        assert sequences_of(conn, schema) == sequences_of(conn, fresh)
        assert planner_facts(conn, schema) == planner_facts(conn, fresh)

    with Store.open(url) as store:
        assert store.ingest("chat", "first", {"text": "hello"}, now=START)
        assert [event.id for event in store.events(limit=10)] == [1]  # ids start over


def test_a_schema_its_test_changed_or_still_uses_is_dropped_not_recycled(
    postgres_server: PostgresServer, pool: InboxPool
) -> None:
    changed = pool.take()
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema_of(changed)}".inbox ADD COLUMN extra TEXT')
    pool.give_back(changed)

    in_use = pool.take()
    still_open = Store.open(in_use)  # a process of the test that never ended
    try:
        pool.give_back(in_use)
    finally:
        still_open.close()

    assert pool.spare == []
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        for url in (changed, in_use):
            assert conn.execute("SELECT to_regnamespace(%s)", (schema_of(url),)).fetchone()[0] is None
