"""Issue 22: on PostgreSQL every statement is a round trip, so the usual ingest, claim and finish are one each
(PgBackend's one-statement paths), and whatever is not usual (a stale lease, a lost run, a retry, a run that failed
something) takes the shared path: the fast path wrote nothing and said so."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from console.core import Store, StoreUnavailable
from tests.support import wait_until

T = 1_700_000_000


def round_trips(store: Store, step: Callable[[], Any]) -> tuple[int, Any]:
    before = store.connection.statements
    result = step()
    return store.connection.statements - before, result


def wal_position(raw: Any) -> str:
    """Where the server's WAL ends now: every later commit's record lies past it."""
    return str(raw.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])


def commit_on_disk(raw: Any, since: str, source_id: str) -> bool:
    """Whether the commit record of the transaction that stored source_id (its row's xmin) is in the WAL flushed to
    disk now, read with pg_walinspect from since on: the ingest's own commit, whatever else the server writes (a
    comparison of the flush position with the insert position failed whenever anything else wrote WAL meanwhile, and
    passed whenever the WAL writer had flushed for it). Read at once after the answer: the WAL writer flushes a
    commit that did not wait within 200 ms, seldom in that instant."""
    raw.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA public")
    flushed, past = raw.execute("SELECT pg_current_wal_flush_lsn()::text, pg_current_wal_flush_lsn() > %s::pg_lsn",
                                (since,)).fetchone()
    if not past:
        return False
    found = raw.execute(
        "SELECT count(*) FROM public.pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) WHERE resource_manager = "
        "'Transaction' AND record_type = 'COMMIT' AND xid = (SELECT xmin FROM inbox WHERE source_id = %s)",
        (since, flushed, source_id)).fetchone()
    return bool(found == (1,))


def test_the_usual_claim_and_finish_are_one_round_trip_each(pg_store: Store) -> None:
    store = pg_store
    gen = store.acquire("A", now=T)
    assert gen is not None
    store.ingest_many([("github", f"e-{n}", {"n": n}) for n in range(3)], now=T)
    trips, batch = round_trips(store, lambda: store.claim_batch("A", gen, now=T))
    assert trips == 1
    assert [(e.source_id, e.status, e.attempts, e.claim_gen) for e in batch] == [
        ("e-0", "running", 1, gen), ("e-1", "running", 1, gen), ("e-2", "running", 1, gen)]
    ids = [e.id for e in batch]
    trips, finished = round_trips(store, lambda: store.finish("A", gen, [ids[2], ids[0], ids[1], ids[0]], now=T + 1))
    assert (trips, finished) == (1, True)
    assert store.counts()["done"] == 3
    assert [(a.kind, a.gen, a.detail) for a in store.history(ids[0])] == [("claim", gen, "attempt 1"),
                                                                          ("finish", gen, None)]
    finishes = store.connection.execute(
        "SELECT event_id FROM attempts WHERE kind = 'finish' ORDER BY id").fetchall()
    assert [row[0] for row in finishes] == [ids[2], ids[0], ids[1]]  # in the order given, each once
    trips, idle = round_trips(store, lambda: store.claim_batch("A", gen, now=T + 2))
    assert (trips, idle) == (1, [])


def test_a_stale_finish_and_a_due_retry_take_the_shared_path(pg_store: Store) -> None:
    store = pg_store
    gen = store.acquire("A", now=T)
    assert gen is not None
    store.ingest("github", "e-1", {}, now=T)
    batch = store.claim_batch("A", gen, now=T)
    ttl = store.options.lease_ttl
    later = store.acquire("B", now=T + ttl + 1)  # A's lease lapsed: B takes over
    assert later is not None and later > gen
    assert store.finish("A", gen, [batch[0].id], now=T + ttl + 2) is False  # fenced, and recorded
    assert store.refused_finish_count() == 1
    assert [a.kind for a in store.history(batch[0].id)][-1] == "refused"
    retaken = store.claim_batch("B", later, now=T + ttl + 2)  # B sees A's run as lost first: the shared path
    assert retaken == [] or [e.source_id for e in retaken] == ["e-1"]
    assert store.counts()["running"] + store.counts()["pending"] == 1
    assert any(a.kind == "lost" for a in store.history(batch[0].id))


def test_a_group_of_new_events_is_one_round_trip_and_a_repeated_key_still_counts(pg_store: Store) -> None:
    store = pg_store
    trips, stored = round_trips(store, lambda: store.ingest_many(
        [("github", "a", {"n": 1}), ("github", "b", {"n": 2})], now=T))
    assert (trips, stored) == (1, [True, True])
    trips, stored = round_trips(store, lambda: store.ingest_many(
        [("github", "b", {"n": 3}), ("github", "c", {"n": 4})], now=T + 1))
    assert (trips, stored) == (1, [False, True])
    assert store.ingest_many([("github", "d", {}), ("github", "d", {})], now=T + 2) == [True, False]
    b = store.find_event("github", "b")
    d = store.find_event("github", "d")
    assert b is not None and (b.duplicates, b.payload) == (1, {"n": 2})
    assert d is not None and d.duplicates == 1
    assert [e.source_id for e in store.events()] == ["d", "c", "b", "a"]


def test_an_idle_claim_does_not_queue_for_the_writers_lock(pg_store: Store, postgres_url: str) -> None:
    # A consumer polling an empty inbox used to take the writers' lock on every poll, queueing behind the producers'
    # ingests (each holds it through its WAL flush) and they behind it. It now looks first, without the lock.
    store = pg_store
    gen = store.acquire("A", now=T)
    assert gen is not None
    store.ingest("github", "e-1", {}, now=T)
    [event] = store.claim_batch("A", gen, now=T)
    assert store.finish("A", gen, [event.id], now=T)
    writer = Store.open(postgres_url)
    try:
        writer.connection.raw.execute(f"BEGIN; SELECT pg_advisory_xact_lock({int(store.connection.target.lock_key)})")
        trips, idle = round_trips(store, lambda: store.claim_batch("A", gen, now=T + 1))  # waited, then failed, before
        assert (trips, idle) == (1, [])
        writer.connection.raw.execute("ROLLBACK")
    finally:
        writer.close()
    store.ingest("github", "e-2", {}, now=T + 2)
    assert [e.source_id for e in store.claim_batch("A", gen, now=T + 2)] == ["e-2"]


def test_a_batch_moves_the_counts_once_a_status_not_once_an_event(pg_store: Store) -> None:
    # The counts follow an UPDATE once a statement (pg_schema 0014): a claim or finish of 100 events used to update
    # the counts rows 200 times in one transaction, each version found by walking the ones before it.
    store = pg_store
    store.ingest_many([("github", f"e-{n}", {"n": n}) for n in range(100)], now=T)
    raw = store.connection.raw

    def counts_rows_written(statement: str) -> int:
        # The transaction's own statistics may still hold earlier transactions' counts not yet flushed: a difference.
        read = ("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE schemaname = current_schema() "
                "AND relname = 'inbox_counts'")
        raw.execute("BEGIN")
        try:
            before = raw.execute(read).fetchone()
            raw.execute(statement)
            after = raw.execute(read).fetchone()
            assert before is not None and after is not None
            return int(after[0]) - int(before[0])
        finally:
            raw.execute("ROLLBACK")

    assert counts_rows_written("UPDATE inbox SET status = 'running' WHERE status = 'pending'") == 2
    assert counts_rows_written("UPDATE inbox SET duplicates = duplicates + 1") == 0  # no status moved
    assert counts_rows_written(
        "UPDATE inbox SET status = CASE WHEN id % 3 = 0 THEN 'done' WHEN id % 3 = 1 THEN 'dead' ELSE status END") == 3
    gen = store.acquire("A", now=T)
    assert gen is not None
    batch = store.claim_batch("A", gen, now=T)
    assert len(batch) == 100
    assert store.finish("A", gen, [e.id for e in batch[:60]], now=T + 1)
    store.finish("A", gen, [batch[60].id], now=T + 1, error="boom")  # back to pending, to be tried again
    actual = dict(store.connection.execute("SELECT status, count(*) FROM inbox GROUP BY status").fetchall())
    assert {status: n for status, n in store.counts().items() if n} == actual
    assert actual == {"done": 60, "running": 39, "pending": 1}


def test_an_ingest_that_waited_for_the_lock_answers_only_once_on_disk(pg_store: Store, postgres_url: str) -> None:
    # An ingest that finds the writers' lock taken is told so at once (a round trip), then commits without waiting for
    # the WAL flush (the writers behind it need not wait for its flush too) and waits for the flush once the lock is
    # released, in one more round trip: when it answers, its commit record is in the WAL on disk. (Without the wait
    # after the lock, this answered with its commit not yet on disk.)
    store = pg_store
    raw = store.connection.raw
    key = int(store.connection.target.lock_key)
    waiter = raw.info.backend_pid
    holder = Store.open(postgres_url)
    try:
        for n in range(5):
            since = wal_position(raw)
            holder.connection.raw.execute(f"BEGIN; SELECT pg_advisory_xact_lock({key})")
            answers: list[tuple[int, bool]] = []
            ingest = threading.Thread(target=lambda n=n, answers=answers: answers.append(
                round_trips(store, lambda: store.ingest("github", f"e-{n}", {"n": n}, now=T))))
            ingest.start()
            wait_until(lambda: holder.connection.raw.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s",
                (waiter,)).fetchone() == (1,), "the ingest waits for the writers' lock")
            holder.connection.raw.execute("COMMIT")
            ingest.join(timeout=30)
            assert answers == [(2, True)]
            assert commit_on_disk(raw, since, f"e-{n}"), f"ingest {n} answered before the WAL holding it was flushed"
    finally:
        holder.close()
    since = wal_position(raw)
    trips, stored = round_trips(store, lambda: store.ingest("github", "alone", {}, now=T))  # the lock free: as ever
    assert (trips, stored) == (1, True)
    assert commit_on_disk(raw, since, "alone")
    assert store.ingest("github", "e-0", {"n": 0}, now=T) is False
    assert store.counts()["pending"] == 6


def test_a_group_of_events_counts_once_a_status(pg_store: Store) -> None:
    # INSERTs are counted once a statement too (pg_schema 0017): ingest_many of 100 used to update the counts row 100
    # times in one transaction. A repeated key (counted as a copy on its row) and a single ingest still count right.
    store = pg_store
    raw = store.connection.raw
    read = ("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE schemaname = current_schema() "
            "AND relname = 'inbox_counts'")
    raw.execute("BEGIN")
    try:
        before = raw.execute(read).fetchone()
        raw.execute("INSERT INTO inbox (source, source_id, payload, created_at, updated_at) "
                    "SELECT 'github', 'x-' || n, '{}', 1, 1 FROM generate_series(1, 100) AS n")
        after = raw.execute(read).fetchone()
        assert before is not None and after is not None
        assert int(after[0]) - int(before[0]) == 1
    finally:
        raw.execute("ROLLBACK")
    assert store.ingest_many([("github", f"e-{n}", {"n": n}) for n in range(100)], now=T) == [True] * 100
    assert store.ingest_many([("github", "e-1", {}), ("github", "f", {})], now=T) == [False, True]
    assert store.ingest("github", "g", {}, now=T) is True
    assert store.counts()["pending"] == 102
    assert store.integrity_problems() == []


def test_a_group_that_waited_for_the_lock_answers_only_once_on_disk(pg_store: Store, postgres_url: str) -> None:
    # ingest_many the same way as a single ingest: found taken, the lock is not held through its flush, and the
    # answer still waits for the flush. (Without the wait after the lock, this answered before the flush.)
    store = pg_store
    raw = store.connection.raw
    key = int(store.connection.target.lock_key)
    waiter = raw.info.backend_pid
    holder = Store.open(postgres_url)
    try:
        since = wal_position(raw)
        holder.connection.raw.execute(f"BEGIN; SELECT pg_advisory_xact_lock({key})")
        answers: list[tuple[int, list[bool]]] = []
        group = threading.Thread(target=lambda: answers.append(round_trips(store, lambda: store.ingest_many(
            [("github", f"e-{n}", {"n": n}) for n in range(50)], now=T))))
        group.start()
        wait_until(lambda: holder.connection.raw.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s",
            (waiter,)).fetchone() == (1,), "the group waits for the writers' lock")
        holder.connection.raw.execute("COMMIT")
        group.join(timeout=30)
        assert answers == [(1, [True] * 50)]
        assert commit_on_disk(raw, since, "e-7"), "the group answered before the WAL holding it was flushed"
    finally:
        holder.close()
    assert store.ingest_many([("github", "e-1", {}), ("github", "f", {})], now=T) == [False, True]
    assert store.counts()["pending"] == 51


def test_a_claim_or_finish_cut_off_from_the_server_is_store_unavailable(pg_store: Store, postgres_url: str) -> None:
    # The one-statement claim and finish say what the shared path says when the server goes away (StoreUnavailable:
    # the engine tries again later), not psycopg's own error; the next call reaches the server again.
    store = pg_store
    gen = store.acquire("A", now=T)
    assert gen is not None
    store.ingest_many([("github", f"e-{n}", {"n": n}) for n in range(3)], now=T)
    killer = Store.open(postgres_url)

    def cut_off() -> None:
        killer.connection.raw.execute("SELECT pg_terminate_backend(%s)", (store.connection.raw.info.backend_pid,))

    try:
        cut_off()
        with pytest.raises(StoreUnavailable):
            store.claim_batch("A", gen, now=T)
        batch = store.claim_batch("A", gen, now=T)
        assert len(batch) == 3
        cut_off()
        with pytest.raises(StoreUnavailable):
            store.finish("A", gen, [e.id for e in batch], now=T)
        assert store.finish("A", gen, [e.id for e in batch], now=T) is True
    finally:
        killer.close()
    assert store.counts()["done"] == 3
