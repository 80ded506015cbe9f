"""Keyset paging in the orders the console sorts by: every event once, in order, reading only a page."""

from __future__ import annotations

import re
from typing import Any

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


# What the console pages by: an order, perhaps one status, from a key in the middle; and whether the page may hold
# fresh events (read from inbox_fresh too, merged in order).
PAGES = [
    ({"order": "status", "start": ("m", 10)}, False),  # downwards from "m": "pending" is above it
    ({"order": "status", "start": ("pending", 10)}, True),
    ({"order": "status", "start": ("done", 10), "descending": False}, True),
    ({"order": "source", "start": ("m", 10)}, False),
    ({"order": "id", "status": "pending", "start": (10, 10)}, True),
    ({"order": "id", "status": "dead", "start": (10, 10)}, False),
    ({"order": "status", "status": "pending", "source": "chat"}, True),
]


@pytest.mark.parametrize(("page", "fresh"), PAGES, ids=lambda page: "-".join(map(str, page.values()))
                         if isinstance(page, dict) else str(page))
def test_a_sorted_page_reads_through_an_index_without_sorting_the_inbox(sqlite_store: Store, page: dict[str, Any],
                                                                        fresh: bool) -> None:
    """SQLite's planner (PostgreSQL's: tests/core/test_postgres.py). inbox_status_id holds no fresh event (schema
    0028): where the page may hold fresh ones, they are a page of their own from inbox_fresh (or (source, id)),
    and only the two pages' rows are put in order."""
    store = sqlite_store
    _mixed(store)
    sql, params = store.in_order_statement(limit=7, **page)
    steps = {row[0]: (row[1], str(row[3])) for row in store.connection.execute(f"EXPLAIN QUERY PLAN {sql}", params)}
    plan = " ".join(detail for _, detail in steps.values())
    used = {"status": "inbox_status_id", "source": "inbox_source_id", "id": "inbox_status_id"}[page["order"]]
    assert used in plan and not re.search(r"SCAN inbox(?! USING)", plan), plan
    assert ("MERGE (UNION ALL)" in plan) == fresh, plan
    for parent, detail in steps.values():
        if "TEMP B-TREE" in detail:  # only the merge's own: each part's at most 7 rows, never the inbox
            assert fresh and steps[parent][1] in ("LEFT", "RIGHT"), plan


def test_pending_pages_hold_fresh_and_retried_events_in_order(store: Store) -> None:
    """The pending events come from two indexes (fresh ones from inbox_fresh, the rest from inbox_status_id):
    every page still holds each once, in order, whichever side of a fresh event a page starts."""
    store.ingest_many([("chat", f"e-{n}", {"n": n}) for n in range(30)], now=T0)
    # Some pending events were tried and wait for a retry, or were retried by hand: no longer fresh.
    store.connection.execute("UPDATE inbox SET attempts = 1, next_attempt_at = 5 WHERE id % 4 = 0")
    store.connection.execute("UPDATE inbox SET claim_alone = 1 WHERE id % 7 = 0")
    store.connection.execute("UPDATE inbox SET status = 'done', attempts = 1 WHERE id % 5 = 0")
    everyone = store.events(limit=1000)
    pending = [e.id for e in everyone if e.status == "pending"]
    assert [e.id for e in store.events(status="pending", limit=1000)] == pending
    assert [e.id for e in store.events(status="pending", before_id=20, limit=4)] == [i for i in pending if i < 20][:4]
    assert [e.id for e in store.events(status="pending", after_id=20, limit=3)] == sorted(i for i in pending
                                                                                        if i > 20)[:3][::-1]
    for order in ("status", "id"):
        for descending in (True, False):
            expected = [e.id for e in sorted(everyone, key=lambda e: sort_key(e, order), reverse=descending)]
            seen: list[int] = []
            start = None
            while page := store.events_in_order(order=order, descending=descending, start=start, limit=4):
                seen += [e.id for e in page]
                start = sort_key(page[-1], order)
            assert seen == expected, (order, descending)
            only = [i for i in expected if i in pending]
            assert [e.id for e in store.events_in_order(order=order, descending=descending, status="pending",
                                                        limit=1000)] == only
