"""Keyset paging in the orders the console sorts by: every event once, in order, reading only a page."""

from __future__ import annotations

import pytest

from console.core import Store
from console.core.inbox import SORT_ORDERS, sort_key

T0 = 1_000


def _mixed(store: Store) -> None:
    store.ingest_many([(("chat", "github", "webhook")[n % 3], f"e-{n}", {"n": n}) for n in range(40)], now=T0)
    for n, status in enumerate(("done", "dead", "discarded", "running")):
        store.connection.execute(f"UPDATE inbox SET status = ? WHERE id % 5 = {n}", (status,))


@pytest.mark.parametrize("descending", [True, False], ids=["descending", "ascending"])
@pytest.mark.parametrize("order", SORT_ORDERS)
def test_pages_forwards_and_backwards_cover_the_order_once(store: Store, order: str, descending: bool) -> None:
    _mixed(store)
    everything = sorted(store.events(limit=1000), key=lambda e: sort_key(e, order), reverse=descending)
    expected = [e.id for e in everything]
    seen: list[int] = []
    start = None
    while True:
        page = store.events_in_order(order=order, descending=descending, start=start, limit=7)
        if not page:
            break
        seen += [e.id for e in page]
        start = sort_key(page[-1], order)
    assert seen == expected
    # backwards from the last row: the rows just before it, in display order
    last = everything[-1]
    before = store.events_in_order(order=order, descending=descending, start=sort_key(last, order),
                                   backwards=True, limit=5)
    assert [e.id for e in before] == expected[-6:-1]
    # inclusive: a page that starts with the row itself
    middle = everything[20]
    page = store.events_in_order(order=order, descending=descending, start=sort_key(middle, order),
                                 inclusive=True, limit=3)
    assert [e.id for e in page] == expected[20:23]


def test_filters_apply_in_every_order(store: Store) -> None:
    _mixed(store)
    chats = store.events_in_order(order="status", source="chat", limit=100)
    assert {e.source for e in chats} == {"chat"} and len(chats) == 14
    assert [e.status for e in chats] == sorted((e.status for e in chats), reverse=True)
    dead = store.events_in_order(order="source", descending=False, status="dead", limit=100)
    assert [e.id for e in dead] == [e.id for e in sorted(dead, key=lambda e: (e.source, e.id))]
    with pytest.raises(ValueError, match="unknown order"):
        store.events_in_order(order="payload")


@pytest.mark.parametrize("order", ["status", "source"])
def test_a_sorted_page_reads_through_an_index_without_sorting_the_inbox(sqlite_store: Store, order: str) -> None:
    """SQLite's planner (PostgreSQL's: tests/core/test_postgres.py)."""
    store = sqlite_store
    _mixed(store)
    plan = " ".join(str(row[3]) for row in store.connection.execute(
        f"EXPLAIN QUERY PLAN SELECT id FROM inbox WHERE ({order}, id) < (?, ?) ORDER BY {order} DESC, id DESC LIMIT 7",
        ("m", 10)))
    assert f"inbox_{order}_id" in plan and "TEMP B-TREE" not in plan, plan
