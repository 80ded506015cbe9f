"""A table redrawn from a fresh read is as wide as what it shows now, not as what it showed before: Textual's
DataTable.clear() keeps an auto-width column as wide as its widest cell ever, so a search typed letter by
letter (or a long error since retried) left the shape of the table to timing (the snapshot flakes)."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.core import EventSearch, OutboxSearch, Store
from console.tui.tables import clear_rows
from console.tui.widgets.approvals_pane import ApprovalsPane
from tests.support import pilot_until
from tests.tui.scenes import make_app, open_search, started

SIZE = (120, 40)
LONG = "wide " * 60


async def test_the_search_results_shrink_to_what_they_show(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path, seed=7) as store:
        store.ingest_many([("chat", "long-one", {"text": LONG}), ("chat", "short-one", {"text": "tiny"})],
                          now=clock.now() - 60)
        store.acquire("elsewhere", now=clock.now() + 10_000)  # standby: nothing runs
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        table = screen.events_table
        last = list(table.columns.values())[-1]
        await pilot.press(*"wide")
        await pilot_until(pilot, lambda: table.row_count == 1 and screen._searched == "wide",
                          what="the long match", limit=20)
        wide = last.content_width
        assert wide > 100
        await pilot.press(*["backspace"] * 4, *"tiny")
        await pilot_until(pilot, lambda: table.row_count == 1 and screen._searched == "tiny",
                          what="the short match", limit=20)
        cells = [table.get_row_at(row)[-1] for row in range(table.row_count)]
        widest_now = max(len(str(cell)) for cell in cells)
        assert last.content_width < wide
        assert last.content_width <= max(widest_now, last.label.cell_len) + 2


async def test_the_approvals_are_drawn_again_once_their_column_is_measured(
    db_path: Path, clock: ManualClock
) -> None:
    """The approvals table's rows are laid out again (clear, add) and its column measured from them when it is
    next idle; a frame drawn in between (under load, the snapshot's) drew each row wrapped at the column's old
    width, the 8 columns of its label, and DataTable kept those lines: "“deploy" over "web to" until something
    else changed the table (the nobody-working snapshot flaked on it)."""
    now = clock.now()
    with Store.open(db_path, seed=7) as store:
        store.request_approval("apr-8-1", "deploy web to prod", now=now - 20, expires_in=600)
        store.acquire("elsewhere", now=now + 10_000)  # standby: nothing runs
    app = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(ApprovalsPane)
        table = pane.table
        await pilot_until(pilot, lambda: app.started and table.row_count == 1 and pane.laid_out, what="the approval")
        pane.redraw()  # the rows laid out again, as settle() and a resize do
        table.render_line(0)  # a frame before the table is idle: drawn at the label's width
        await pilot_until(pilot, lambda: next(iter(table.columns.values())).content_width > len("approval"),
                          what="the column measured")
        await pilot.pause()
        drawn = "".join(table.render_line(y).text for y in range(table.size.height))
        assert "“deploy web to prod”" in drawn


async def test_search_results_are_drawn_at_their_measured_width(db_path: Path, clock: ManualClock) -> None:
    """The search screen's result rows are measured as they are added: a frame drawn before the table was next idle
    (under load) drew each message and payload at the column label's width ("Noted: " for "Noted: water the
    plants") and kept those lines behind the message screen (the message-screen snapshot flaked on it)."""
    now = clock.now()
    with Store.open(db_path, seed=7) as store:
        store.ingest("chat", "plants", {"text": "water the plants today"}, now=now - 60)
        store.queue_message("Noted: water the plants", now=now - 30)
        store.acquire("elsewhere", now=now + 10_000)  # standby: nothing runs
        messages = OutboxSearch(store.outbox_messages(limit=10), None)
        events = EventSearch(store.events(limit=10), None)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_search(app, pilot)
        await pilot_until(pilot, lambda: screen.outbox_table.row_count == 1, what="the outbox's first page")
        for table, add, whole in ((screen.outbox_table, lambda: screen._add_messages(messages), "water the plants"),
                                  (screen.events_table, lambda: screen._add_events(events), "the plants today")):
            clear_rows(table)
            add()
            for y in range(table.size.height):  # a frame before the table is idle
                table.render_line(y)
            await pilot.pause()
            drawn = "".join(table.render_line(y).text for y in range(table.size.height))
            assert whole in drawn, drawn
