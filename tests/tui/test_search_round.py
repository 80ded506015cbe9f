"""Search on a large inbox: `#id` and a bare number look the row up directly; a search with no hits in what
it read says so (no "past the end" without rows) and enter reads on, older; ages as the events table writes
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.clock import ManualClock
from console.core import Store
from console.tui.screens import search as search_module
from tests.support import pilot_until
from tests.tui.scenes import make_app, open_search, started, text_of

SIZE = (80, 24)
COUNT = 25_000  # more than one search window (20,000 ids)


def large(db: Path, clock: ManualClock) -> None:
    with Store.open(db, seed=7) as store:
        store.ingest_many([("bulk", f"b-{n}", {"n": n}) for n in range(COUNT)], now=clock.now() - 13 * 60)
        store.acquire("elsewhere", now=clock.now() + 10_000)  # standby: nothing runs


@pytest.mark.parametrize("typed", ["#3", "3"])
async def test_an_id_is_looked_up_directly(db_path: Path, clock: ManualClock, typed: str) -> None:
    large(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await pilot.press(*typed, "enter")
        await pilot_until(pilot, lambda: screen.events_table.row_count > 0, what="the event", limit=20)
        assert next(iter(screen.events_table.rows)).value == "3"
        assert str(screen.events_table.get_row_at(0)[4]) == "13m"  # the events table's way of writing ages


async def test_no_hits_offers_searching_older_on_enter(db_path: Path, clock: ManualClock,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "WINDOWS_PER_PAGE", 1)  # one window a page: 25,000 ids need two
    large(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await pilot.press(*"nowhere", "enter")
        await pilot_until(pilot, lambda: "none found back to #" in text_of(app, "#search-events-title"),
                          what="no hits yet", limit=20)
        title = text_of(app, "#search-events-title")
        assert "past the end" not in title and "enter in the box searches older" in title
        screen.query_one("#search-input").focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: "(all searched)" in text_of(app, "#search-events-title"),
                          what="searched on to the oldest", limit=20)
