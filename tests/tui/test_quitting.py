"""Issue 36: a quit that waits for the run in progress says so at once ("Quitting — waiting for run #1 (up to
10s)"), and a run that finishes within the wait is a clean finish, never a refused late one."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.core import Store
from console.tui.screens.confirm import ConfirmScreen
from tests.support import pilot_until, until
from tests.tui.conftest import reopen
from tests.tui.test_takeover import GatedAgent, console

SIZE = (80, 24)


async def test_a_quit_waiting_for_its_run_says_so_at_once_and_the_run_finishes_cleanly(
    db_path: Path, clock: ManualClock
) -> None:
    with Store.open(db_path) as store:
        store.ingest("chat", "c-1", {"text": "hi"}, now=clock.now())
    agent = GatedAgent()
    app = console(db_path, clock, "console-q", agent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot_until(pilot, lambda: app.started and agent.entered.is_set(), what="a run in progress")
        await pilot.press("q")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await pilot_until(pilot, lambda: any(n.title == "Quitting" for n in app._notifications),
                          what="the quitting toast while the run still holds the quit")
        [said] = [n.message for n in app._notifications if n.title == "Quitting"]
        assert said == f"Quitting — waiting for run #1 (up to {app.engine.shutdown_grace:g}s)"
        assert app.is_running and not agent.release.is_set()  # said while the run still holds the quit
        agent.release.set()
        await pilot_until(pilot, lambda: not app.is_running, what="the quit")
    with reopen(db_path) as store:
        event = store.find_event("chat", "c-1")
        assert event is not None and event.status == "done"
        assert store.refused_finish_count() == 0  # the quit waited for it: a clean finish, not fencing


async def test_a_run_that_outlasts_the_quit_is_not_counted_as_a_refused_late_finish(
    db_path: Path, clock: ManualClock
) -> None:
    """The quit waits its grace, releases the lease (the events go back to pending) and the console closes; the
    run ends later in the process: that is the owner's quit, not fencing, and no refused finish is recorded."""
    with Store.open(db_path) as store:
        store.ingest("chat", "c-1", {"text": "hi"}, now=clock.now())
    agent = GatedAgent()
    app = console(db_path, clock, "console-q", agent)
    app.engine.shutdown_grace = 0.2  # type: ignore[misc]
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot_until(pilot, lambda: app.started and agent.entered.is_set(), what="a run in progress")
        await pilot.press("q")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await pilot_until(pilot, lambda: not app.is_running, what="the quit, the run still going")
    runs = app.engine.worker  # type: ignore[attr-defined]
    agent.release.set()  # the run ends after the quit
    await until(lambda: not runs.busy, what="the abandoned run to end")
    with reopen(db_path) as store:
        event = store.find_event("chat", "c-1")
        assert event is not None and event.status == "pending"  # back for the next worker, its attempt counted
        assert store.refused_finish_count() == 0
