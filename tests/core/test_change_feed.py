"""A commit by another connection wakes whoever waits on the inbox's change feed (on PostgreSQL by
NOTIFY, on SQLite by its data version); with nothing committed the wait runs out."""

from __future__ import annotations

import threading

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
