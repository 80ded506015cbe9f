"""A commit by another connection wakes whoever waits on the inbox's change feed (on PostgreSQL by
NOTIFY, on SQLite by its data version); with nothing committed the wait runs out."""

from __future__ import annotations

import threading
import time

from console.core import Store

T = 1_000_000


def test_a_commit_elsewhere_wakes_the_feed_and_silence_does_not(store: Store) -> None:
    feed = store.change_feed()
    try:
        assert feed.wait(0.2) is False  # nothing happened
        other = store.reopen()
        try:
            other.ingest("chat", "m-1", {"text": "hi"}, now=T)
            assert feed.wait(10) is True  # bounded: a lost wake-up fails here, not by hanging
            assert feed.wait(0.2) is False  # one commit wakes once
        finally:
            other.close()
    finally:
        feed.close()


def test_a_waiter_blocked_in_the_feed_is_woken_by_a_commit_made_meanwhile(store: Store) -> None:
    feed = store.change_feed()
    woke: list[bool] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        woke.append(feed.wait(30))

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        assert started.wait(10)
        other = store.reopen()
        try:
            other.ingest("chat", "m-2", {}, now=T)
        finally:
            other.close()
        waiter.join(30)
        assert not waiter.is_alive() and woke == [True]
    finally:
        waiter.join(30)
        feed.close()


def test_a_transaction_that_writes_nothing_wakes_nobody(store: Store) -> None:
    """A standby engine tries the lease each time it is woken. If its refused acquire (a write transaction
    that changes nothing) woke the waiters, it would wake itself again at once: on PostgreSQL an idle
    standby made about 300 refused acquires a second, each taking the writers' lock from the holder."""
    assert store.acquire("holder", now=T) == 1
    feed = store.change_feed()
    other = store.reopen()
    try:
        assert other.acquire("standby", now=T) is None
        assert other.renew("standby", 1, now=T) is False
        assert feed.wait(0.2) is False
        other.ingest("chat", "m-3", {}, now=T)  # a transaction that writes still wakes it
        assert feed.wait(10) is True
    finally:
        other.close()
        feed.close()


def test_closing_the_feed_from_another_thread_ends_a_long_wait_at_once(store: Store) -> None:
    """The engine's watcher waits longest_wait at a time and stop() closes the feed: the close ends a wait under
    way at once, on both backends. PostgreSQL's wait held its connection, so its close waited for the wait to
    end and its waits were half a second: an idle console's engine woke twice a second."""
    feed = store.change_feed()
    assert feed.longest_wait >= 30
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(feed.wait(feed.longest_wait))
        except Exception as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)  # let the waiter block in poll(): the close below must reach a wait already under way
    closed = time.monotonic()
    feed.close()
    waiter.join(feed.longest_wait + 10)
    # Ended by the close, not by its 30 s running out (bounded generously for a loaded machine).
    assert not waiter.is_alive() and outcome == [False]
    assert time.monotonic() - closed < 5
    assert feed.wait(1) is False  # a closed feed waits no more


def test_a_long_wait_is_woken_by_every_commit_and_only_by_commits(store: Store) -> None:
    """The same long waits still wake at once for a commit made meanwhile, once for a burst, and not for a
    transaction that changes nothing."""
    feed = store.change_feed()
    other = store.reopen()
    try:
        for n in range(3):
            woke: list[bool] = []
            waiter = threading.Thread(target=lambda woke=woke: woke.append(feed.wait(feed.longest_wait)))
            waiter.start()
            other.ingest("chat", f"burst-{n}-a", {}, now=T)
            other.ingest("chat", f"burst-{n}-b", {}, now=T)
            waiter.join(feed.longest_wait + 10)
            assert woke == [True]
            feed.wait(0.5)  # the second commit of the burst may land after the first woke the waiter
        assert feed.wait(0.3) is False
    finally:
        other.close()
        feed.close()
