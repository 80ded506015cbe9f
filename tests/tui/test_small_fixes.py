"""Issue 21's smaller items: the error line ticks with its row, a paused timer has no next fire, the detail's
footer offers only keys that act, the inject form's pre-fill is selected, a step within a second, toasts in
plain text."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import TextArea
from textual.worker import WorkerState

from console.clock import ManualClock
from console.core.models import Timer
from console.tui.screens.detail import DetailScreen, took_words
from console.tui.screens.inject import InjectScreen
from console.tui.screens.timers import timer_cells
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started, text_of
from tests.tui.test_events_workflow import DEAD, select

SIZE = (80, 24)


async def test_the_error_line_under_the_table_ticks_with_the_row(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        store.ingest("chat", "slow-1", {"text": "hi"}, now=clock.now())
        store.connection.execute("UPDATE inbox SET attempts = 1, next_attempt_at = ?, error = 'TimeoutError: 30s' "
                                 "WHERE source_id = 'slow-1'", (clock.now() + 42,))
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        pane = app.query_one(EventsPane)
        assert "next try in 42s" in text_of(app, "#events-error")
        clock.advance(10)
        app._tick()  # the clock's second: nothing is read again
        await pilot_until(pilot, lambda: str(pane.table.get_cell("8", "retry")) == "in 32s", what="the row")
        assert "#8 failed attempt 1, next try in 32s: TimeoutError: 30s" in text_of(app, "#events-error")


def test_a_paused_timer_shows_no_next_fire() -> None:
    timer = Timer("digest", 1_700_070_000, 86_400, None, None, {}, "coalesce", True, False, None)
    cells = timer_cells(timer, 1_700_000_000, None)
    assert str(cells[1]) == "— (paused)"
    active = timer_cells(Timer("digest", 1_700_070_000, 86_400, None, None, {}, "coalesce", False, False, None),
                         1_700_000_000, None)
    assert str(active[1]).startswith("in 19h")


def test_a_step_committed_within_its_second_took_under_one() -> None:
    assert (took_words(0), took_words(1), took_words(75)) == ("took under 1s", "took 1s", "took 1m15s")


async def test_the_details_footer_offers_retry_and_answers_only_where_they_act(filled: Path,
                                                                               clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await select(app, pilot, 2)  # done, no approval
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")
        screen = app.screen
        shown = {b.action for _n, b, enabled, _t in screen.active_bindings.values() if b.show and enabled}
        assert "retry" not in shown and "answer('yes')" not in shown and "answer('no')" not in shown
        assert "r retry" not in str(screen.query_one("#detail-dialog").border_subtitle)
        await pilot.press("left_square_bracket")  # [ : on to the newer one, the dead #3
        await pilot_until(pilot, lambda: screen.view.event is not None and screen.view.event.id == DEAD,
                          what="the dead event")
        await pilot.pause()
        shown = {b.action for _n, b, enabled, _t in screen.active_bindings.values() if b.show and enabled}
        assert "retry" in shown
        assert str(screen.query_one("#detail-dialog").border_subtitle).startswith("r retry · t timeline · c copy")


async def test_the_inject_forms_example_payload_is_selected(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await pilot.press("i")
        await pilot_until(pilot, lambda: isinstance(app.screen, InjectScreen), what="the form")
        area = app.screen.query_one("#inject-payload", TextArea)
        await pilot_until(pilot, lambda: area.selected_text == '{"text": "hello"}', what="the pre-fill selected")
        await pilot.press(*"{}")
        assert area.text == "{}"  # typing replaces the example


async def test_the_screenshot_toast_is_plain_words(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        app.notify("Saved screenshot to [$text-success]'/tmp/shot.svg'", title="Screenshot")  # Textual's words
        await pilot_until(pilot, lambda: any(n.title == "Screenshot" for n in app._notifications), what="toast")
        toast = next(n for n in app._notifications if n.title == "Screenshot")
        assert toast.message == "Saved screenshot to '/tmp/shot.svg'"


async def test_an_activity_read_that_lands_as_the_header_closes_is_harmless(filled: Path,
                                                                            clock: ManualClock) -> None:
    """Textual removes a widget's children before the widget itself: while the console closes, the header is
    still attached with its title line gone, and a sparkline read finishing then met NoMatches('#header-title')
    (a traceback at shutdown)."""
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        header = app.query_one(ConsoleHeader)
        with reopen(filled) as store:
            store.ingest("chat", "late-1", {"text": "one more"}, now=clock.now())  # the sparkline moves
        await header.query_one("#header-line").remove()  # where the close has got to: the header's lines gone
        assert header.is_attached
        worker = header.refresh_activity()
        await worker.wait()
        assert worker.state is WorkerState.SUCCESS
        assert app._exception is None
