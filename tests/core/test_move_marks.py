"""The marks a move leaves in an inbox (core/copy.py): every write transaction reads them inside its own write
lock and refuses, whichever writer it is, with one line; reads go on. Both backends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from console.core import InboxIncomplete, InboxMoved, InboxMoving, MoveRefusal, Store, StoreError, StoreUnavailable
from console.core.copy import _write_mark, abandon_move
from tests.support import wait_until

T = 1_700_000_000
ELSEWHERE = "postgresql://me@db.example/agent?schema=ada"

# One of each kind of writer: the CLI's ingest and the receiver's, the engine's lease and claims and finish,
# an owner's answer, the outbox, timers, memory, a retry.
WRITES: dict[str, Callable[[Store], Any]] = {
    "ingest": lambda s: s.ingest("chat", "new", {}, now=T + 1),
    "ingest_many": lambda s: s.ingest_many([("chat", "new-1", {}), ("chat", "new-2", {})], now=T + 1),
    "acquire": lambda s: s.acquire("engine-B", now=T + 1),
    "answer": lambda s: s.answer_approval("apr-1", "yes", now=T + 1, via="cli"),
    "queue_message": lambda s: s.queue_message("hello", now=T + 1),
    "add_timer": lambda s: s.add_timer("daily", T + 60, {}, now=T + 1),
    "set_memory": lambda s: s.set_memory("owner", "Ada", now=T + 1),
    "run_scheduler": lambda s: s.run_scheduler(now=T + 1),
}


def _lived_in(store: Store) -> None:
    store.ingest("chat", "m-1", {"text": "hello"}, now=T)
    store.request_approval("apr-1", "refund order 7", now=T, expires_in=3_600)


def _mark(store: Store, state: str, other: str) -> None:
    with store.storage.transaction(guarded=False):
        _write_mark(store, state, other, T)


@pytest.mark.parametrize(("state", "refusal", "words"), [
    ("moving", InboxMoving, f"this inbox is being moved to {ELSEWHERE} (agent-console migrate, since "),
    ("moved", InboxMoved, f"this inbox was moved to {ELSEWHERE} ("),
    ("incomplete", InboxIncomplete, f"this inbox is an unfinished copy from {ELSEWHERE} (agent-console migrate, "),
])
def test_a_marked_inbox_refuses_every_write_and_keeps_reading(store: Store, state: str, refusal: type[MoveRefusal],
                                                              words: str) -> None:
    _lived_in(store)
    _mark(store, state, ELSEWHERE)
    before = (store.counts(), store.outbox_counts(), store.pending_approvals(), store.lease())
    for name, write in WRITES.items():
        with pytest.raises(refusal) as caught:
            write(store)
        line = str(caught.value)
        assert line.startswith(words) and "\n" not in line, (name, line)
    assert (store.counts(), store.outbox_counts(), store.pending_approvals(), store.lease()) == before
    assert [e.source_id for e in store.events()] == ["m-1"]
    with pytest.raises(refusal):
        store.check_open_for_work()
    # Being moved is a wait (writers try again, a webhook gets 503 with Retry-After); the others are not.
    assert isinstance(caught.value, StoreUnavailable) == (state == "moving")


def test_an_unmarked_inbox_is_open_for_work(store: Store) -> None:
    store.check_open_for_work()
    assert store.move_mark() is None and store.move_refusal() is None
    assert store.ingest("chat", "m-1", {}, now=T)


def test_a_writer_waiting_for_the_lock_when_the_mark_commits_sees_it(store: Store) -> None:
    """The mark is read inside the writer's own write transaction, after its lock is taken: a write that
    waited behind the marking transaction is refused, never committed after the copy's snapshot."""
    _lived_in(store)
    writer = store.reopen()
    waited: list[int] = []
    if store.backend == "sqlite":
        def busy(tries: int) -> bool:
            waited.append(tries)
            time.sleep(0.005)  # the busy handler's pacing between tries of the lock
            return tries < 10_000
        writer.connection.set_busy_handler(busy)
    outcome: list[object] = []
    trying = threading.Event()

    def write() -> None:
        trying.set()
        try:
            outcome.append(writer.ingest("chat", "late", {}, now=T + 1))
        except MoveRefusal as exc:
            outcome.append(exc)

    thread = threading.Thread(target=write)
    try:
        with store.storage.transaction(guarded=False):
            _write_mark(store, "moving", ELSEWHERE, T)
            thread.start()
            trying.wait(10)
            # The writer is held at its lock (BEGIN IMMEDIATE, the advisory lock) until this one commits.
            wait_until(lambda: _waiting_for_lock(store, waited), "the writer to wait for the write lock", limit=10)
            assert outcome == []
        thread.join(timeout=30)
    finally:
        writer.close()
    assert len(outcome) == 1 and isinstance(outcome[0], InboxMoving), outcome
    assert store.find_event("chat", "late") is None


def _waiting_for_lock(store: Store, waited: list[int]) -> bool:
    if store.backend == "postgresql":
        rows = store.connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchall()
        return bool(rows[0][0])
    return bool(waited)  # SQLite called the writer's busy handler: it is at BEGIN IMMEDIATE, waiting


def test_abandoning_a_move_lets_the_inbox_take_work_again(store: Store) -> None:
    _lived_in(store)
    _mark(store, "moving", ELSEWHERE)
    assert abandon_move(store) == ("moving", ELSEWHERE)
    assert store.ingest("chat", "after", {}, now=T + 1)
    _mark(store, "moved", ELSEWHERE)
    assert abandon_move(store) == ("moved", ELSEWHERE)
    store.check_open_for_work()
    with pytest.raises(StoreError, match="is not being moved, nor was it moved"):
        abandon_move(store)
    _mark(store, "incomplete", ELSEWHERE)
    with pytest.raises(StoreError, match=r"is an unfinished copy from .*: run migrate again or delete it"):
        abandon_move(store)
    assert store.move_mark() is not None and store.move_mark()[0] == "incomplete"  # type: ignore[index]
