"""Issue 22: on SQLite an ingest reads its key and the move mark, then writes, in one deferred transaction
(Backend.try_ingest): the write upgrades the read's snapshot to the write lock, which SQLite grants only
if no other connection has committed since. So what the read saw still holds when the row is written. Another
writer landing between the read and the write is made to happen here (apsw's statement trace runs it just before
the INSERT), on a real file with two connections: the ingest takes the long way and still does the right thing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from console.core import InboxMoving, Store
from console.core.copy import _write_mark

T = 1_700_000_000
ELSEWHERE = "postgresql://me@db.example/agent?schema=ada"


def before_the_insert(store: Store, meanwhile: Callable[[], object]) -> list[str]:
    """Run meanwhile (another connection's write) once, just before store's first INSERT into the inbox; returns
    every statement store ran."""
    seen: list[str] = []

    def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
        seen.append(" ".join(sql.split()))
        if sql.lstrip().startswith("INSERT INTO inbox") and seen.count(seen[-1]) == 1:
            meanwhile()
        return True

    store.connection.exec_trace = trace
    return seen


def test_a_new_event_goes_in_one_transaction_without_a_second_read(sqlite_store: Store) -> None:
    seen = before_the_insert(sqlite_store, lambda: None)
    assert sqlite_store.ingest("github", "d-1", {"n": 1}, now=T) is True
    assert [sql.split()[0] for sql in seen] == ["BEGIN", "SELECT", "INSERT", "COMMIT"]
    assert sqlite_store.event(1) is not None and sqlite_store.counts()["pending"] == 1


def test_another_writer_between_the_read_and_the_write_sends_the_ingest_the_long_way(sqlite_store: Store) -> None:
    other = sqlite_store.reopen()
    try:
        seen = before_the_insert(sqlite_store, lambda: other.ingest("github", "d-2", {"n": 2}, now=T))
        assert sqlite_store.ingest("github", "d-1", {"n": 1}, now=T) is True
        assert sum(sql.startswith("INSERT INTO inbox") for sql in seen) == 2  # refused its stale snapshot once
        assert "ROLLBACK" in seen and "BEGIN IMMEDIATE" in seen
        assert {e.source_id: e.payload for e in other.events()} == {"d-1": {"n": 1}, "d-2": {"n": 2}}
        assert other.counts()["pending"] == 2
    finally:
        other.close()


def test_the_same_key_stored_between_the_read_and_the_write_is_a_refused_copy(sqlite_store: Store) -> None:
    other = sqlite_store.reopen()
    try:
        before_the_insert(sqlite_store, lambda: other.ingest("github", "d-1", {"first": True}, now=T))
        assert sqlite_store.ingest("github", "d-1", {"first": False}, now=T) is False
        sqlite_store.write_refusals()
        (event,) = other.events()
        assert event.payload == {"first": True} and event.duplicates == 1
    finally:
        other.close()


def test_a_move_mark_committed_between_the_read_and_the_write_refuses_the_ingest(sqlite_store: Store) -> None:
    other = sqlite_store.reopen()

    def mark() -> None:
        with other.storage.transaction(guarded=False):
            _write_mark(other, "moving", ELSEWHERE, T)

    try:
        before_the_insert(sqlite_store, mark)
        with pytest.raises(InboxMoving):
            sqlite_store.ingest("github", "d-1", {}, now=T)
        assert other.events() == [] and other.counts()["pending"] == 0
    finally:
        other.close()
