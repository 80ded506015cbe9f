"""The schema: a file migrated step by step equals one created in one go."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from console.core import Store, StoreError
from console.core.db import SCHEMA_VERSION, connect, migrations, schema_dump, user_version
from tests.core.backends import latest_schema_version


def test_user_version_is_the_number_of_migrations(store: Store) -> None:
    assert SCHEMA_VERSION == len(migrations()) >= 2
    assert store.schema_version() == latest_schema_version(store)


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    assert [number for number, _, _ in migrations()] == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("start", range(1, SCHEMA_VERSION))
def test_a_migrated_file_equals_a_fresh_one(tmp_path: Path, start: int) -> None:
    old = connect(tmp_path / "old.db", schema_version=start)
    assert user_version(old) == start
    partial = schema_dump(old)
    old.close()

    with Store.open(tmp_path / "old.db") as migrated, Store.open(tmp_path / "fresh.db") as fresh:
        assert migrated.schema_version() == fresh.schema_version() == SCHEMA_VERSION
        assert migrated.schema() == fresh.schema()
        assert partial != fresh.schema()  # the later migrations did change something
        assert migrated.integrity_check() == "ok"


def test_a_migrated_file_keeps_its_events(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db") as store:
        store.ingest("github", "d-1", {"pr": 1}, now=10)
    with Store.open(tmp_path / "inbox.db") as again:  # reopening runs no migration twice
        assert again.schema_version() == SCHEMA_VERSION
        assert [(e.source_id, e.payload) for e in again.events()] == [("d-1", {"pr": 1})]


def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = connect(path)
    conn.pragma("user_version", SCHEMA_VERSION + 1)
    conn.close()
    with pytest.raises(StoreError, match="newer than this agent-console understands") as caught:
        Store.open(path)
    assert str(path) in str(caught.value)


def test_a_new_file_takes_small_pages_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    with Store.open(tmp_path / "new.db") as new:
        assert new.connection.execute("PRAGMA page_size").fetchall() == [(1024,)]

    # A file made before 1 KiB pages: SQLite's default 4 KiB, already in WAL mode.
    old = apsw.Connection(str(tmp_path / "old.db"))
    old.execute("PRAGMA journal_mode=WAL")
    old.execute("CREATE TABLE before_us (x)")
    old.close()
    with Store.open(tmp_path / "old.db") as kept:
        assert kept.connection.execute("PRAGMA page_size").fetchall() == [(4096,)]
        assert kept.ingest("chat", "a", {"text": "still works"}, now=1)
        assert kept.integrity_check() == "ok"
