"""A table redrawn from a fresh read is as wide as what it shows now, not as what it showed before: Textual's
DataTable.clear() keeps an auto-width column as wide as its widest cell ever, so a search typed letter by
letter (or a long error since retried) left the shape of the table to timing (the snapshot flakes)."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.core import Store
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
