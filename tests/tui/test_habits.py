"""Issue 36, item 8: j/k, g/G, z zooms the focused pane, L shows the engine's log lines live."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Log

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.events_pane import EventsPane
from console.tui.widgets.log_pane import LogPane
from tests.support import pilot_until
from tests.tui.scenes import make_app
from tests.tui.test_snapshots import Compare, ready

SIZES, IDS = [(80, 24), (120, 40)], ["80x24", "120x40"]


def selected(app: ConsoleApp) -> int | None:
    event = app.query_one(EventsPane).selected_event()
    return None if event is None else event.id


async def test_j_k_move_and_g_G_jump_to_the_newest_and_the_oldest(db_path: Path, clock: ManualClock) -> None:
    with Store.open(db_path) as store:
        for n in range(60):  # more than a page at 80x24: G moves the window, g brings it back
            store.ingest("chat", f"c-{n}", {"text": f"hello {n}"}, now=clock.now() - 600 + n)
    app = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started and selected(app) == 60, what="the newest selected")
        await pilot.press("j", "j")
        await pilot_until(pilot, lambda: selected(app) == 58, what="j moved down twice")
        await pilot.press("k")
        await pilot_until(pilot, lambda: selected(app) == 59, what="k moved up")
        await pilot.press("G")
        await pilot_until(pilot, lambda: 1 in [e.id for e in app.query_one(EventsPane).page.events],  # type: ignore[union-attr]
                          what="G: the oldest page")
        await pilot.press("g")
        await pilot_until(pilot, lambda: selected(app) == 60, what="g: the newest again")


async def test_a_reread_landing_between_j_and_its_highlight_keeps_the_row_j_moved_to(db_path: Path,
                                                                                    clock: ManualClock) -> None:
    """CI saw j j end on 59, not 58: a re-read of the page (the run finishing) landed after j moved the table's
    cursor but before the pane heard of it, and put the cursor back on the remembered newest row."""
    with Store.open(db_path) as store:
        for n in range(30):
            store.ingest("chat", f"c-{n}", {"text": f"hello {n}"}, now=clock.now() - 600 + n)
    app = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started and selected(app) == 30, what="the newest selected")
        pane = app.query_one(EventsPane)
        pane.table.action_cursor_down()
        assert pane.page is not None
        pane.show(pane.page)  # the re-read, before the highlight's message is handled
        await pilot.pause()
        assert selected(app) == 29
        assert pane.table.cursor_row == 1


async def test_z_zooms_the_focused_pane_and_z_again_puts_it_back(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        await pilot.press("z")
        await pilot_until(pilot, lambda: isinstance(app.screen.maximized, EventsPane), what="the events zoomed")
        assert app.query_one(EventsPane).size.height > 20  # the whole screen but the footer's line
        await pilot.press("z")
        await pilot_until(pilot, lambda: app.screen.maximized is None, what="back")
        app.query_one(ApprovalsPane).table.focus()
        await pilot.press("z")
        await pilot_until(pilot, lambda: isinstance(app.screen.maximized, ApprovalsPane), what="the approvals zoomed")


async def test_L_shows_the_engines_log_lines_live_and_hides_them(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    engine_log = logging.getLogger("agent_console.engine")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="start")
        engine_log.warning("before the pane: kept")
        await pilot.press("L")
        await pilot_until(pilot, lambda: app.main.log_pane is not None and app.main.log_pane.display, what="shown")
        lines = app.main.log_pane.query_one(Log).lines  # type: ignore[union-attr]
        assert any("WARNING agent_console.engine before the pane: kept" in line for line in lines)
        writer = threading.Thread(target=engine_log.info, args=("a line from a thread \x1b[31mred",))
        writer.start()
        writer.join()
        await pilot_until(pilot, lambda: any("from a thread" in line for line in lines), what="the new line, live")
        assert not any("\x1b" in line for line in lines)  # escaped for the terminal
        await pilot.press("L")
        await pilot_until(pilot, lambda: not app.main.log_pane.display, what="hidden")  # type: ignore[union-attr]
    assert app.main.log_lines not in logging.getLogger("agent_console").handlers  # taken off on quit


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_log_pane_snapshot(snap_compare: Compare, filled: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    app = make_app(filled, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        await pilot.press("L")
        await pilot_until(pilot, lambda: app.main.log_pane is not None, what="the pane")
        pane = app.main.log_pane
        assert isinstance(pane, LogPane)
        app.main.log_lines.lines.clear()  # the engine's own start lines vary with timing
        pane.show_kept()
        logging.getLogger("agent_console.worker").info("run 12 done: 1 event, 2 steps")
        logging.getLogger("agent_console.telegram").warning("telegram paused: the bot token was refused (401)")
        await pilot_until(pilot, lambda: len(pane.query_one(Log).lines) == 2, what="two lines")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_zoomed_events_snapshot(snap_compare: Compare, filled: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=size, run_before=ready(app, "z"))
