"""Pilot tests for marking (space run quickly, shift+↑/↓ ranges) and the confirm dialog (its question
wrapped, Cancel focused for destructive actions, esc shown)."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.widgets import Button
from textual.widgets._footer import FooterKey

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.screens.confirm import ConfirmScreen
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.scenes import make_app, shown_ids, started

SIZE = (80, 24)


def burst(app: ConsoleApp, key: str, times: int) -> None:
    """Keys as a terminal delivers them when typed quickly: all queued before the first is handled."""
    driver = app._driver
    assert driver is not None
    for _ in range(times):
        driver.send_message(events.Key(key, " " if key == "space" else None))


def many(db: Path, clock: ManualClock, count: int = 40) -> None:
    with Store.open(db, seed=7) as store:
        store.ingest_many([("bulk", f"b-{n}", {"n": n}) for n in range(count)], now=clock.now() - 100)


async def test_space_pressed_quickly_marks_each_row_once_across_a_page_edge(db_path: Path,
                                                                           clock: ManualClock) -> None:
    many(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        rows = len(shown_ids(app))
        assert 3 < rows < 20
        first = shown_ids(app)[0]
        burst(app, "space", rows + 3)  # past the page's last row: the window moves on
        expected = list(range(first, first - rows - 3, -1))
        await pilot_until(pilot, lambda: pane.marked_ids() == expected, what=f"{expected} marked", limit=10)
        await pilot_until(pilot, lambda: pane.selected_event() is not None
                          and pane.selected_event().id == first - rows - 3,  # type: ignore[union-attr]
                          what="the cursor on the next unmarked row")


async def test_shift_down_and_up_mark_a_range(db_path: Path, clock: ManualClock) -> None:
    many(db_path, clock, 10)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        await pilot.press("down", "shift+down", "shift+down", "shift+down")
        await pilot_until(pilot, lambda: pane.marked_ids() == [9, 8, 7, 6], what="#9 to #6 marked", limit=10)
        assert pane.selected_event().id == 6  # type: ignore[union-attr]
        await pilot.press("down", "down", "down", "shift+up")  # a range upwards (newer) adds to the marks
        await pilot_until(pilot, lambda: pane.marked_ids() == [9, 8, 7, 6, 4, 3], what="#3 and #4 added",
                          limit=10)
        assert pane.selected_event().id == 4  # type: ignore[union-attr]


async def test_a_destructive_question_wraps_and_enter_cancels(db_path: Path, clock: ManualClock) -> None:
    many(db_path, clock, 3)
    with Store.open(db_path, seed=7) as store:
        store.discard([3], now=clock.now())
        store.retry_events([3], now=clock.now())
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("space", "space", "D")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        screen = app.screen
        question = screen.query_one("#confirm-question")
        assert question.size.height > 1  # wrapped, not cut at the dialog's edge
        assert "(u undoes the discard; r runs one again)" in str(question.render())
        focused = app.focused
        assert isinstance(focused, Button) and focused.id == "confirm-no"
        assert "esc" in [k.key_display for k in screen.query("FooterKey").results(FooterKey)]
        await pilot.press("enter")
        await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="cancelled")
    with Store.open(db_path, check=False) as store:
        assert store.counts()["discarded"] == 0
