"""The gate before intake (console/core/gate.py), on both backends: a sound inbox passes; on SQLite the quick
check is bounded in time and finds damaged pages; on PostgreSQL the schema's version and a write that commits."""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest

from console.core import Store, StoreError
from console.core.copy import move_inbox
from console.core.db import QUICK_CHECK_CACHE_KIB, bounded_quick_check
from console.core.errors import InboxDamaged
from console.core.gate import START_CHECK_SECONDS, check_before_intake
from console.core.pg import SCHEMA_VERSION as PG_SCHEMA_VERSION


def test_a_sound_inbox_passes_the_gate(store: Store) -> None:
    store.ingest("chat", "m-1", {"text": "hello"}, now=1_000)
    report = check_before_intake(store)
    assert report.problems == [] and report.finished
    assert 0 <= report.seconds < START_CHECK_SECONDS


def test_the_quick_check_stops_at_its_bound_and_says_it_did_not_finish(sqlite_store: Store) -> None:
    sqlite_store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 300}) for n in range(300)], now=1_000)
    stopped = bounded_quick_check(sqlite_store.connection, seconds=0)
    assert stopped.problems == [] and not stopped.finished  # stopped at its first look at the clock
    whole = bounded_quick_check(sqlite_store.connection, seconds=60)
    assert whole.problems == [] and whole.finished
    # The handler is gone afterwards: a long read on the same connection is not cut short.
    assert len(sqlite_store.events(limit=300)) == 300


def test_the_quick_check_leaves_the_page_cache_small(db_path: Path) -> None:
    # It reads every page once: with SQLite's default 2,000 KiB cache it filled the writer's cache with the
    # whole file's first pages, which the writer then kept for ever (a third of the console's growth after its
    # first frame on a 1,000,000-event inbox; docs/performance.md).
    with Store.open(db_path) as store:
        store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 300}) for n in range(12_000)], now=1_000)
    with Store.open(db_path) as store:
        conn = store.connection
        default = conn.execute("PRAGMA cache_size").fetchall()[0][0]
        assert bounded_quick_check(conn, seconds=60).finished
        cached = conn.status(apsw.SQLITE_DBSTATUS_CACHE_USED)[0]
        assert cached < QUICK_CHECK_CACHE_KIB * 1024 * 2, cached  # pages plus SQLite's bookkeeping for them
        assert conn.execute("PRAGMA cache_size").fetchall()[0][0] == default  # the connection's own size again
        assert len(store.events(limit=100)) == 100


def test_damaged_pages_are_refused_in_the_line_check_gives(db_path: Path) -> None:
    with Store.open(db_path) as store:
        store.ingest_many([("bulk", f"b-{n}", {"text": "x" * 300}) for n in range(1_000)], now=1_000)
        leaves = [int(p) for (p,) in store.connection.execute(
            "SELECT pageno FROM dbstat WHERE name = 'inbox' AND pagetype = 'leaf' ORDER BY pageno")]
        size = store.connection.execute("PRAGMA page_size").fetchall()[0][0]
    with db_path.open("r+b") as handle:
        handle.seek((leaves[len(leaves) // 2] - 1) * size + 8)  # the cells of one leaf, past its header
        handle.write(random.Random(5).randbytes(size - 8))
    # Opening does not check (a command's cost stays flat in the file's size); the gate does.
    with Store.open(db_path) as store, pytest.raises(InboxDamaged) as refused:
        check_before_intake(store)
    line = str(refused.value)
    assert line.startswith(f"inbox {db_path} is damaged: it failed its integrity check (")
    assert "restore a backup" in line and "\n" not in line


def test_a_postgresql_inbox_whose_schema_is_newer_is_refused(pg_store: Store) -> None:
    pg_store.connection.raw.execute("UPDATE schema_version SET version = %s", (PG_SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=f"schema version {PG_SCHEMA_VERSION + 1}, newer"):
        check_before_intake(pg_store)


def test_a_postgresql_inbox_that_cannot_take_a_write_is_refused(pg_store: Store) -> None:
    # As on a read-only standby: every transaction of this session is read-only.
    pg_store.connection.raw.execute("SET default_transaction_read_only = on")
    with pytest.raises(StoreError, match="read-only transaction"):
        check_before_intake(pg_store)


def test_a_moved_inbox_is_refused_by_the_gate_in_the_moves_words(store: Store, tmp_path: Path) -> None:
    store.ingest("chat", "m-1", {"text": "hello"}, now=1_000)
    with Store.open(tmp_path / "target.db") as target:
        move_inbox(store, target, now=2_000)
        check_before_intake(target)  # the copy is complete: it takes work
    with pytest.raises(StoreError, match=r"was moved to .*target\.db"):
        check_before_intake(store)


def test_ingest_leaves_out_the_write_probe_its_own_write_makes(pg_store: Store) -> None:
    # One commit fewer for every `ingest` on PostgreSQL: the store's own write is refused the same way.
    before = pg_store.connection.commits
    check_before_intake(pg_store, probe_write=False)
    assert pg_store.connection.commits == before
    check_before_intake(pg_store)
    assert pg_store.connection.commits == before + 1
