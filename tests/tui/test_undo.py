"""Issue 36, item 3: u undoes the last undoable action of this console, whatever is selected: a discard (all of a
bulk discard's events), a note forgotten, a timer or a schedule deleted; a stack at least 20 deep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.core import ScheduleDraft, ScheduleSpec, Store
from console.tui.app import ConsoleApp
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.notes import NotesScreen
from console.tui.screens.timers import TimersScreen
from console.tui.undo import UNDO_DEPTH, Undoable, UndoStack
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started
from tests.tui.test_snapshots import ready

Compare = Callable[..., bool]
SIZES = [(80, 24), (120, 40)]
IDS = ["80x24", "120x40"]
UNTRUSTED = {"trusted": False, "event_id": 1, "source": "github", "source_id": "d-1", "tainted_by": ["github d-1"]}


def six_dead(db: Path, clock: ManualClock) -> None:
    """Six dead events, a note, a timer; another worker holds the lease (nothing runs here)."""
    now = clock.now()
    with Store.open(db, seed=7, max_attempts=1) as store:
        for n in range(6):
            store.ingest("chat", f"c-{n}", {"text": f"order {n} failed"}, now=now - 100 + n)
        gen = store.acquire("worker", now=now - 90)
        assert gen is not None
        ids = [event.id for event in store.claim_batch("worker", gen, now=now - 90)]
        assert store.finish("worker", gen, ids, now=now - 90, error="RuntimeError: the shop was down")
        assert len(store.events(status="dead")) == 6
        store.set_memory("dentist", "Dr Who, Tuesdays", now=now - 80)
        store.add_timer("plants", now + 3600, {"title": "water the plants"}, every=86_400, now=now - 70)
        store.acquire("elsewhere", now=now + 10_000)


def toasts(app: ConsoleApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


def statuses(db: Path) -> list[str]:
    with reopen(db) as store:
        return [event.status for event in store.events()]


async def discard_all_six(app: ConsoleApp, pilot: Pilot[Any], db: Path) -> None:
    pane = app.query_one(EventsPane)
    await pilot_until(pilot, lambda: pane.page is not None and len(pane.page.events) == 6, what="six rows")
    pane.table.focus()
    await pilot.press(*["space"] * 6)
    await pilot_until(pilot, lambda: len(pane.marked) == 6, what="six marked")
    await pilot.press("D")
    await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
    await pilot.press("y")
    await pilot_until(pilot, lambda: statuses(db) == ["discarded"] * 6, what="the discard")


async def test_u_undoes_a_bulk_discard_all_six_and_then_says_nothing_is_left(db_path: Path,
                                                                            clock: ManualClock) -> None:
    six_dead(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(app, pilot)
        await discard_all_six(app, pilot, db_path)
        assert any(t.startswith("Discard: 6 events discarded") for t in toasts(app))
        await pilot.press("up")  # the undo is of the last action, not of the row under the cursor
        await pilot.press("u")
        await pilot_until(pilot, lambda: statuses(db_path) == ["dead"] * 6, what="all six dead again")
        assert "Undone: discarded 6 events: 6 of 6 discarded events dead again, not run" in toasts(app)
        await pilot.press("u")
        await pilot_until(pilot, lambda: any("Nothing to undo" in t for t in toasts(app)), what="nothing left")


async def test_a_forgotten_note_and_a_deleted_timer_come_back_newest_first(db_path: Path,
                                                                           clock: ManualClock) -> None:
    six_dead(db_path, clock)
    with reopen(db_path) as store:
        note_before, timer_before = store.memory(), store.timers()
    app = make_app(db_path, clock)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(app, pilot)
        await pilot.press("m")
        await pilot_until(pilot, lambda: isinstance(app.screen, NotesScreen) and bool(app.screen.notes),
                          what="the notes")
        await pilot.press("d")  # forgets at once: it is undoable
        await pilot_until(pilot, lambda: any("Forgot dentist · u puts it back" in t for t in toasts(app)),
                          what="forgot")
        await pilot.press("escape")
        await pilot.press("t")
        await pilot_until(pilot, lambda: isinstance(app.screen, TimersScreen) and app.screen.selected() is not None,
                          what="the timers")
        await pilot.press("D")
        await pilot_until(pilot, lambda: any("Deleted the timer plants" in t for t in toasts(app)), what="deleted")
        with reopen(db_path) as store:
            assert store.memory() == [] and store.timers() == []
        await pilot.press("ctrl+z")  # in the timers screen u resumes a timer: ctrl+z is the undo there
        await pilot_until(pilot, lambda: any(t.startswith("Undone: deleted the timer plants") for t in toasts(app)),
                          what="the timer back")
        await pilot.press("escape")
        await pilot.press("u")
        await pilot_until(pilot, lambda: any(t.startswith("Undone: forgot the note dentist") for t in toasts(app)),
                          what="the note back")
        with reopen(db_path) as store:
            assert store.memory() == note_before and store.timers() == timer_before


async def test_the_stack_keeps_at_least_twenty_actions_newest_first() -> None:
    assert UNDO_DEPTH >= 20
    stack, undone = UndoStack(), []

    def put_back(n: int) -> Callable[[], Any]:
        async def undo() -> str:
            undone.append(n)
            return f"#{n}"
        return undo

    for n in range(UNDO_DEPTH + 5):
        stack.push(Undoable(f"action {n}", put_back(n)))
    assert len(stack) == UNDO_DEPTH
    while (action := stack.pop()) is not None:
        await action.put_back()
    assert undone == list(range(UNDO_DEPTH + 4, 4, -1))  # the newest first; the five oldest forgotten


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_undone_bulk_discard_snapshot(snap_compare: Compare, db_path: Path, clock: ManualClock,
                                      size: tuple[int, int]) -> None:
    six_dead(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        await discard_all_six(app, pilot, db_path)
        for notification in list(app._notifications):
            app.untoast(notification)
        await pilot.press("u")
        await pilot_until(pilot, lambda: statuses(app_db := db_path) == ["dead"] * 6 and bool(app_db), what="undone")
        await pilot_until(pilot, lambda: [e.status for e in app.query_one(EventsPane).page.events] == ["dead"] * 6,  # type: ignore[union-attr]
                          what="the rows dead again")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


async def test_a_deleted_schedule_comes_back_on_u_from_the_main_screen(db_path: Path, clock: ManualClock) -> None:
    """d on the schedules' table deletes at once and pushes the undo: u on the main screen puts the schedule back
    whole (its untrusted origin, its pause, its timer), and the timers screen lists it again."""
    six_dead(db_path, clock)
    now = clock.now()
    spec = ScheduleSpec("deploys", "check deploys", "look at the deploys", "every", at=now + 3600, every=3600,
                        expires_at=now + 3 * 86_400)
    with Store.open(db_path) as store:
        with store.write_transaction():  # as a run's fenced finish writes it
            store._write_schedule(ScheduleDraft(spec, UNTRUSTED), now)
        store.pause_schedule("deploys", now=now)
        before = store.schedules()
    app = make_app(db_path, clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        await pilot.press("t")
        await pilot_until(pilot, lambda: isinstance(app.screen, TimersScreen) and bool(app.screen.view
                                                                                       and app.screen.view.schedules),
                          what="the schedules")
        screen = app.screen
        assert isinstance(screen, TimersScreen)
        screen.query_one("#schedules-table").focus()
        await pilot.press("d")
        await pilot_until(pilot, lambda: any("schedule deploys deleted · ctrl+z here" in t for t in toasts(app)),
                          what="deleted")
        with reopen(db_path) as store:
            assert store.schedules() == []
        await pilot.press("escape")
        await pilot.press("u")
        await pilot_until(pilot, lambda: any(t.startswith("Undone: deleted schedule deploys (check deploys)")
                                             for t in toasts(app)), what="the schedule back")
        with reopen(db_path) as store:
            assert store.schedules() == before
        await pilot.press("t")
        await pilot_until(pilot, lambda: isinstance(app.screen, TimersScreen) and bool(
            app.screen.view and [row["id"] for row in app.screen.view.schedules] == ["deploys"]),
            what="listed again")
