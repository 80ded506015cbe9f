"""Issue 36, item 1: every event row says what it is (the "what" column), cut to the column, and a search finds
it by those words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from console.clock import ManualClock
from console.core import Store
from console.core.mail import MailCursor
from console.edges.verifiers import Delivery
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.scenes import make_app, open_search, started
from tests.tui.test_snapshots import ready

Compare = Callable[..., bool]
SIZES = [(80, 24), (120, 40)]
IDS = ["80x24", "120x40"]
SUBJECT = "Invoice 42 is overdue: the second reminder before we hand it to a collection agency"


def every_source(db: Path, clock: ManualClock) -> None:
    now = clock.now()
    with Store.open(db, seed=7) as store:
        store.take_mail("email", MailCursor(1796642668, 2, now - 300), now=now - 300, events=[(
            "1796642668:2", {"from": {"address": "ann@example.org", "name": "Ann Lee"}, "subject": SUBJECT,
                             "text": "Please pay."})])
        store.take_chat_updates("telegram", "telegram", now=now - 200, cursor="104", events=[(
            "555001:103", {"kind": "chat", "text": "book the table for two at 8", "chat_id": 555001,
                           "message_id": 103})])
        store.ingest("github", "d-77", Delivery("d-77", "pull_request", {
            "action": "opened", "pull_request": {"title": "Fix the login redirect"}}).payload, now=now - 100)
        store.add_timer("plants", now - 60, {"title": "Water the plants"}, now=now - 70)
        assert store.run_scheduler(now=now - 60) == 1
        store.acquire("elsewhere", now=now + 10_000)  # standby: nothing runs


def what_cells(pane: EventsPane) -> dict[str, str]:
    table = pane.table
    return {str(key.value): str(table.get_cell(key, "what")) for key in table.rows}


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_each_row_says_what_it_is_cut_to_the_column(db_path: Path, clock: ManualClock,
                                                          size: tuple[int, int]) -> None:
    every_source(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=size) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        await pilot_until(pilot, lambda: len(what_cells(pane)) == 4, what="four rows")
        cells = what_cells(pane)
        width = pane.what_width
        assert cells["2"] == "book the table for two at 8"[:width - 1] + "…" if width < 27 else \
            cells["2"] == "book the table for two at 8"
        assert cells["3"].startswith("pull_request.open")
        assert cells["4"] == "Water the plants"
        assert cells["1"].startswith("Invoice 42") and cells["1"].endswith("…")  # too long for any width
        assert all(cell_len(cell) <= width for cell in cells.values())
        # the column takes the room the terminal gives it: wider at 120 columns than at 80
        assert width == 18 if size[0] == 80 else width > 30


async def test_a_search_finds_an_event_by_its_summary_and_shows_it(db_path: Path, clock: ManualClock) -> None:
    every_source(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await pilot.press(*"ann overdue", "enter")
        await pilot_until(pilot, lambda: screen.events_table.row_count == 1, what="the e-mail", limit=20)
        assert str(screen.events_table.get_cell("1", "what · error")).startswith(
            "Invoice 42 is overdue: the second reminder")


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_what_column_snapshot(snap_compare: Compare, db_path: Path, clock: ManualClock,
                              size: tuple[int, int]) -> None:
    every_source(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Any) -> None:
        await ready(app)(pilot)

    assert snap_compare(app, terminal_size=size, run_before=run_before)
