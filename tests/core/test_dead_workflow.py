"""Dead events as in Sidekiq / Oban: discard (kept for the record), retry several, the inbox rebuilt for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core import STATUSES, Store
from console.core.db import connect, migrations
from console.core.options import StoreOptions
from console.core.sqlite import SqliteBackend

T0 = 1_000


def _dead(store: Store, source_id: str, *, now: int) -> int:
    """An event that failed every attempt: dead, with its reason."""
    store.ingest("manual", source_id, {"poison": True}, now=now)
    for attempt in range(store.options.max_attempts):
        at = now + 1000 * attempt  # past every backoff
        gen = store.acquire("w", now=at)
        assert gen is not None
        claimed = store.claim_batch("w", gen, now=at)
        assert [e.source_id for e in claimed] == [source_id]
        store.finish("w", gen, [claimed[0].id], now=at + 1, error="boom")
        store.release("w", gen)
    event = store.find_event("manual", source_id)
    assert event is not None and event.status == "dead"
    return event.id


def test_discard_keeps_the_event_for_the_record_and_counts_it(store: Store) -> None:
    dead = _dead(store, "p-1", now=T0)
    store.ingest("chat", "c-1", {"text": "hi"}, now=T0)
    assert store.discard([dead], now=T0 + 9000, reason="not worth it") == [dead]
    event = store.event(dead)
    assert event is not None and event.status == "discarded"
    assert event.error == "boom" and event.dead_reason == "failed"  # why it died is kept
    assert event.updated_at == T0 + 9000
    assert [(a.kind, a.detail) for a in store.history(dead)][-1] == ("discard", "not worth it")
    assert store.counts() == {"pending": 1, "running": 0, "done": 0, "dead": 0, "discarded": 1}
    assert store.status(now=T0 + 9000)["events"]["discarded"] == 1
    assert [e.id for e in store.events(status="discarded")] == [dead]
    assert not store.ingest("manual", "p-1", {"poison": True}, now=T0 + 9001)  # its key still refuses a copy


def test_a_discarded_event_is_never_claimed(store: Store) -> None:
    store.ingest("chat", "c-1", {"text": "hi"}, now=T0)
    pending = store.find_event("chat", "c-1")
    assert pending is not None
    assert store.discard([pending.id], now=T0) == [pending.id]
    gen = store.acquire("w", now=T0)
    assert gen is not None
    assert store.claim_batch("w", gen, now=T0 + 10_000) == []


def test_a_pending_event_discarded_and_retried_says_it_was_discarded(store: Store) -> None:
    store.ingest("chat", "c-1", {"text": "hi"}, now=T0)
    pending = store.find_event("chat", "c-1")
    assert pending is not None
    store.discard([pending.id], now=T0)
    assert store.retry_events([pending.id], now=T0 + 1) == [pending.id]
    assert [(a.kind, a.detail) for a in store.history(pending.id)][-1] == (
        "retry", "retried by hand (was: discarded)")


def test_discard_leaves_running_and_done_events_alone(store: Store) -> None:
    store.ingest_many([("chat", "a", {}), ("chat", "b", {})], now=T0)
    gen = store.acquire("w", now=T0)
    assert gen is not None
    first, second = store.claim_batch("w", gen, now=T0)
    store.finish("w", gen, [first.id], now=T0 + 1)
    assert store.discard([first.id, second.id, 999], now=T0 + 2) == []
    assert [e.status for e in store.events()] == ["running", "done"]
    assert store.finish("w", gen, [second.id], now=T0 + 3)  # its worker still finishes it
    assert store.counts()["discarded"] == 0


def test_retry_several_brings_back_dead_and_discarded_events_in_one_go(store: Store) -> None:
    one, two, three = (_dead(store, f"p-{n}", now=T0 + 10_000 * n) for n in (1, 2, 3))
    store.discard([two], now=T0 + 50_000)
    store.ingest("chat", "c-1", {}, now=T0)
    pending = store.find_event("chat", "c-1")
    assert pending is not None
    moved = store.retry_events([three, two, pending.id, one, one, 12345], now=T0 + 60_000)
    assert moved == [three, two, one]  # the order given, each once; pending and unknown ids left alone
    assert {store.event(i).status for i in moved} == {"pending"}  # type: ignore[union-attr]
    tried = f"{store.options.max_attempts} attempts"
    assert [(a.kind, a.detail) for a in store.history(one)][-1] == (
        "retry", f"retried by hand (was: failed {tried}; last error: boom)")
    assert [(a.kind, a.detail) for a in store.history(two)][-1] == (
        "retry", f"retried by hand (was: discarded; failed {tried}; last error: boom)")
    assert {store.event(i).dead_reason for i in moved} == {None}  # type: ignore[union-attr]
    assert store.counts() == {"pending": 4, "running": 0, "done": 0, "dead": 0, "discarded": 0}


def test_retry_dead_keeps_its_contract_dead_only(store: Store) -> None:
    dead = _dead(store, "p-1", now=T0)
    store.discard([dead], now=T0 + 9000)
    assert not store.retry_dead(dead, now=T0 + 9001)
    assert store.retry_dead_matching(now=T0 + 9001) == 0


DISCARDED_MIGRATION = next(number for number, name, _ in migrations() if name.endswith("_discarded.sql"))


def _columns(store: Store) -> list[str]:
    return [row[0] for row in store.connection.execute("SELECT name FROM pragma_table_info('inbox') ORDER BY cid")]


def _inbox_rows(store: Store, columns: list[str] | None = None) -> list[tuple[object, ...]]:
    """Every row, in the given columns (all of the inbox's by default)."""
    names = ", ".join(columns or _columns(store))
    return store.connection.execute(f"SELECT {names} FROM inbox ORDER BY id").fetchall()


def _objects(store: Store) -> list[tuple[str, str, str]]:
    """The inbox's indexes and triggers with their definitions (spacing aside), so one recreated with another
    column list or WHERE clause shows, not only one left out."""
    rows = store.connection.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE tbl_name = 'inbox' AND type <> 'table' AND sql IS NOT NULL "
        "ORDER BY type, name"
    ).fetchall()
    return [(kind, name, " ".join(sql.split())) for kind, name, sql in rows]


def test_the_rebuild_keeps_every_column_row_index_trigger_and_count(tmp_path: Path) -> None:
    """The inbox is rebuilt to allow the new state. Every column the file had before (whichever migration
    added it) keeps every row's value; indexes and count triggers are back; the counts match the rows."""
    path = tmp_path / "inbox.db"
    old = connect(path, schema_version=DISCARDED_MIGRATION - 1)
    old.close()
    options = StoreOptions(outbox_gap=0, backoff_jitter=0.0)
    before = Store(SqliteBackend(connect(path, migrate=False), str(path)), options)
    conn = before.connection
    for n, status in enumerate(("pending", "running", "done", "dead", "dead", "done")):
        conn.execute("INSERT INTO inbox (source, source_id, payload, status, created_at, updated_at) "
                     "VALUES ('s', ?, '{}', ?, ?, ?)", (f"id-{n}", status, n, n))
    # Every other column gets a value of its own, so a column the rebuild forgets shows as a lost value.
    fixed = {"id", "source", "source_id", "status"}
    for column in _columns(before):
        if column not in fixed:
            conn.execute(f"UPDATE inbox SET {column} = id * 7 + length(?)", (column,))
    # Why the dead ones died (0013's column), as the engine writes it.
    conn.execute("UPDATE inbox SET dead_reason = CASE WHEN id % 2 = 0 THEN 'failed' ELSE 'lost' END "
                 "WHERE status = 'dead'")
    conn.execute("UPDATE inbox SET dead_reason = NULL WHERE status <> 'dead'")
    columns, rows, objects = _columns(before), _inbox_rows(before), _objects(before)
    # The indexes on inbox as 0013 left them, every one of them (outbox's 0013 index is not inbox's).
    assert {name for kind, name, _ in objects if kind == "index"} == {
        "inbox_fresh", "inbox_retry", "inbox_running", "inbox_alone", "inbox_status_id", "inbox_source_id"}
    assert "dead_reason" in columns
    before.close()

    with Store.open(path) as after:
        assert _columns(after)[:len(columns)] == columns
        assert _inbox_rows(after, columns) == rows  # later migrations may add columns of their own
        # Later migrations may change an index of their own: 0028 left fresh events out of inbox_status_id.
        later = {"inbox_status_id": "CREATE INDEX inbox_status_id ON inbox (status, id) WHERE status <> 'pending' "
                                    "OR attempts > 0 OR claim_alone = 1"}
        assert _objects(after) == [(kind, name, later.get(name, sql)) for kind, name, sql in objects]
        reasons = [(e.status, e.dead_reason) for e in after.events(status="dead")]
        assert sorted(reasons) == [("dead", "failed"), ("dead", "lost")]
        outbox_event = "SELECT name FROM sqlite_schema WHERE type = 'index' AND name = 'outbox_event'"
        assert after.connection.execute(outbox_event).fetchall() == [("outbox_event",)]
        assert after.connection.execute("PRAGMA foreign_key_check").fetchall() == []
        assert after.integrity_check() == "ok"
        assert after.counts() == {"pending": 1, "running": 1, "done": 2, "dead": 2, "discarded": 0}
        dead = [e.id for e in after.events(status="dead")]
        assert after.discard(dead, now=99) == dead
        assert after.counts() == {"pending": 1, "running": 1, "done": 2, "dead": 0, "discarded": 2}


@pytest.mark.parametrize("status", STATUSES)
def test_every_state_is_allowed_and_counted(store: Store, status: str) -> None:
    store.ingest("s", "x", {}, now=T0)
    store.connection.execute("UPDATE inbox SET status = ?", (status,))
    assert store.counts()[status] == 1
    assert sum(store.counts().values()) == 1


def test_restore_to_dead_undoes_a_discard_without_running_the_event(store: Store) -> None:
    """Issue 21.9: retrying a discarded event runs it again; restoring it puts it back among the dead, unrun."""
    dead = _dead(store, "p-1", now=T0)
    store.discard([dead], now=T0 + 9000)
    assert store.restore_to_dead([dead, dead, 12345], now=T0 + 9001) == [dead]
    event = store.event(dead)
    assert event is not None and event.status == "dead"
    assert event.dead_reason == "failed" and event.error == "boom"  # why it died, as before the discard
    assert event.attempts == store.options.max_attempts  # no fresh budget: it is not meant to run
    assert [(a.kind, a.detail) for a in store.history(dead)][-1] == (
        "restore", "restored to dead by hand (was: discarded); not run")
    assert store.counts() == {"pending": 0, "running": 0, "done": 0, "dead": 1, "discarded": 0}
    gen = store.acquire("w", now=T0 + 99_000)
    assert gen is not None
    assert store.claim_batch("w", gen, now=T0 + 99_000) == []  # never claimed


def test_restore_to_dead_moves_only_discarded_events_kept_whole(store: Store) -> None:
    dead = _dead(store, "p-1", now=T0)
    store.ingest("chat", "c-1", {"text": "hi"}, now=T0)
    pending = store.find_event("chat", "c-1")
    assert pending is not None
    assert store.restore_to_dead([dead, pending.id], now=T0 + 9000) == []  # dead already; pending runs
    assert store.event(pending.id).status == "pending"  # type: ignore[union-attr]
    store.discard([pending.id], now=T0 + 9001)  # a pending event given up on is restored to dead too
    assert store.restore_to_dead([pending.id], now=T0 + 9002) == [pending.id]
    assert store.event(pending.id).status == "dead"  # type: ignore[union-attr]
