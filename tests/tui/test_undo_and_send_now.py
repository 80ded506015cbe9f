"""Issue 21.9 in the console: a discarded event is put back among the dead without running (u, the console's undo
of the discard, and u in its detail), and a message the send gap holds is sent now on the urgent lane, after a
yes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console.clock import ManualClock
from console.tui.app import ConsoleApp
from console.tui.commands import key_of, run
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.detail import DetailScreen
from console.tui.screens.message import MessageScreen
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, shown_ids, started

SIZE = (100, 30)


def discarded_one(db: Path, clock: ManualClock) -> int:
    with reopen(db) as store:
        dead = store.events(status="dead")[0].id
        assert store.discard([dead], now=clock.now()) == [dead]
    return dead


def toasts(app: ConsoleApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


def offered(app: ConsoleApp) -> set[str]:
    return {b.binding.id for b in app.screen.active_bindings.values() if b.binding.id and b.binding.show}


async def select(app: ConsoleApp, pilot: Any, event_id: int) -> None:
    pane = app.query_one(EventsPane)
    await pilot_until(pilot, lambda: event_id in shown_ids(app), what=f"#{event_id} shown")
    pane.table.move_cursor(row=shown_ids(app).index(event_id))
    await pilot_until(pilot, lambda: (e := pane.selected_event()) is not None and e.id == event_id,
                      what=f"#{event_id} selected")


async def test_u_undoes_a_discard_the_event_dead_again_not_run(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        with reopen(filled) as store:
            dead = store.events(status="dead")[0].id
        await select(app, pilot, dead)
        await pilot.press("D")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await pilot_until(pilot, lambda: any(t.startswith("Discard:") for t in toasts(app)), what="the toast")
        assert any("u undoes it (dead again)" in t for t in toasts(app))
        await pilot.press("down")  # the undo acts on the last action, wherever the cursor is
        await pilot.press("u")
        await pilot_until(pilot, lambda: any(t.startswith("Undone:") for t in toasts(app)), what="the undo")
        assert f"Undone: discarded #{dead}: #{dead} is dead again, not run (r runs it)" in toasts(app)
        with reopen(filled) as store:
            event = store.event(dead)
            assert event is not None and event.status == "dead" and event.attempts > 0
        await pilot.press("u")  # nothing left to undo, and it says so
        await pilot_until(pilot, lambda: any("Nothing to undo" in t for t in toasts(app)), what="nothing left")


async def test_an_event_detail_offers_restore_only_while_discarded(filled: Path, clock: ManualClock) -> None:
    dead = discarded_one(filled, clock)
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await app.main.open_detail(dead)
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")
        assert "detail.restore" in offered(app)
        await pilot.press("u")
        await pilot_until(pilot, lambda: "detail.restore" not in offered(app), what="restore offered no more")
        with reopen(filled) as store:
            assert store.event(dead).status == "dead"  # type: ignore[union-attr]


async def test_send_now_asks_then_moves_a_held_message_to_the_urgent_lane(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        store.dispatch(lambda batch: None, now=clock.now(), channel="console")  # what is due goes; the gap starts
        message_id = store.queue_message("the weekly digest", now=clock.now())
    app = make_app(filled, clock, settings={"outbox_gap": 3600})
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await app.main.open_message(message_id)
        await pilot_until(pilot, lambda: isinstance(app.screen, MessageScreen), what="the message")
        assert "message.send_now" in offered(app)
        await pilot.press("s")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("escape")  # a no changes nothing
        await pilot_until(pilot, lambda: isinstance(app.screen, MessageScreen), what="back to the message")
        with reopen(filled) as store:
            assert store.outbox_message(message_id).urgent is False  # type: ignore[union-attr]
        await pilot.press("s")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await pilot_until(pilot, lambda: "message.send_now" not in offered(app), what="send now done")
        with reopen(filled) as store:
            assert store.outbox_message(message_id).urgent is True  # type: ignore[union-attr]
        assert any("goes out at once" in t for t in toasts(app))


async def test_the_palette_undoes_with_the_key_beside_it(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert key_of(app, "undo") == "u"
        await run(app, "undo")()
        await pilot_until(pilot, lambda: any("Nothing to undo" in t for t in toasts(app)), what="the toast")
