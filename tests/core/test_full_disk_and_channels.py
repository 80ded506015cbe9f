"""The Store under a full disk (limit_pages, a rollback that really happens after SQLITE_FULL) and the checks on
the channels it dispatches to."""

from __future__ import annotations

import pytest

from console.core import Store, StoreUnavailable


def test_full_database_rolls_back_and_the_connection_recovers(sqlite_store: Store) -> None:
    store = sqlite_store  # a page cap is a SQLite file's; PostgreSQL's full disk is its server's
    assert store.ingest("hook", "small", {"n": 1}, now=1)
    size = store.limit_pages(1)
    assert size > 1  # clamped to the file's current size, not to one page
    with pytest.raises(StoreUnavailable, match="full"):
        store.ingest_many([("hook", f"big-{n}", {"text": "w" * 20_000}) for n in range(3)], now=2)
    assert [e.source_id for e in store.events()] == ["small"]  # nothing of the group was kept
    store.limit_pages(1 << 30)
    assert store.ingest_many([("hook", "after", {"text": "w" * 20_000})], now=3) == [True]


def test_limit_pages_refuses_nonsense(sqlite_store: Store) -> None:
    store = sqlite_store
    with pytest.raises(ValueError):
        store.limit_pages(0)


def test_single_send_dispatch_is_unchanged(store: Store) -> None:
    sent: list[list[str]] = []
    store.queue_message("one", now=10)
    assert store.dispatch(lambda batch: sent.append(batch.bodies), now=10, channel="solo") == 1
    assert sent == [["one"]]
    [message] = store.outbox_messages()
    assert message.status == "sent" and message.channel == "solo" and store.deliveries(str(message.batch_key)) == {}


def test_a_send_plan_needs_channels_with_unique_names(store: Store) -> None:
    class Named:
        at_most_once = False

        def __init__(self, name: str) -> None:
            self.name = name

    with pytest.raises(ValueError, match="at least one"):
        store.plan_send([], now=1)
    with pytest.raises(ValueError, match="unique"):
        store.plan_send([Named("a"), Named("a")], now=1)
