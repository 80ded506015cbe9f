"""The timers screen: t (or the palette) opens it; each timer's schedule, next fire, catch-up policy and state;
p / u / r pause, resume and run the highlighted timer now; a shows one-offs that fired; an answered approval's
expiry timer is not there. Snapshots at 80x24 and 120x40."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.screens.timers import TimersScreen
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app

Compare = Callable[..., bool]
UTC: dict[str, object] = {"timezone": "UTC"}  # clock times the same on every machine


@pytest.fixture
def with_timers(filled: Path, clock: ManualClock) -> Path:
    now = clock.now()
    with Store.open(filled) as store:
        store.add_timer("tick", now + 300, {"task": "tick"}, every=300, now=now)
        store.add_timer("standup", now, {"task": "standup"}, cron="0 9 * * 1-5", tz="Europe/Berlin",
                        catch_up="each", now=now)
        store.add_timer("reminder", now + 3600, {"say": "stretch"}, now=now)
        store.add_timer("backup", now + 7200, {"task": "backup"}, every=86_400, now=now)
        store.pause_timer("backup", True)
        store.add_timer("fired-once", now - 600, {}, now=now - 900)
        store.run_scheduler(now=now - 500)  # the one-off fires: it is listed only with a
    return filled


async def open_timers(app: ConsoleApp, pilot: Pilot[Any]) -> TimersScreen:
    await pilot_until(pilot, lambda: app.started, what="the engine")
    await pilot.press("t")
    await pilot_until(pilot, lambda: isinstance(app.screen, TimersScreen) and app.screen.view is not None,
                      what="the timers screen")
    assert isinstance(app.screen, TimersScreen)
    return app.screen


def rows(screen: TimersScreen) -> dict[str, list[str]]:
    table = screen.query_one(DataTable)
    return {str(table.get_row_at(i)[0]): [str(cell) for cell in table.get_row_at(i)]
            for i in range(table.row_count)}


def highlight(screen: TimersScreen, timer_id: str) -> None:
    assert screen.view is not None
    screen.query_one(DataTable).move_cursor(row=[t.id for t in screen.view.timers].index(timer_id))


async def test_t_lists_each_timers_schedule_next_fire_catch_up_and_state(with_timers: Path, clock: ManualClock) -> None:
    app = make_app(with_timers, clock, settings=UTC)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timers(app, pilot)
        shown = rows(screen)
        assert shown["tick"] == ["tick", "in 5m00s (22:18)", "coalesce", "active", "every 5m00s", "never"]
        assert shown["standup"][1:5] == ["in 9h46m (Wed 08:00)", "each", "active", "cron '0 9 * * 1-5' Europe/Berlin"]
        assert shown["backup"][1:4] == ["— (paused)", "coalesce", "paused"]  # a paused timer does not fire
        assert shown["reminder"][4:] == ["once", "never"]
        # The pending approvals' expiry timers are listed as such; the answered one's (apr-7-1) is gone.
        assert shown["expire:apr-8-1"][4] == "approval expiry"
        assert "expire:apr-7-1" not in shown and "fired-once" not in shown
        await pilot.press("a")
        await pilot_until(pilot, lambda: "fired-once" in rows(screen), what="the fired one-off")
        assert rows(screen)["fired-once"][1:4] == ["—", "coalesce", "fired"]
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, TimersScreen), what="the screen closed")


async def test_pause_resume_and_run_now_write_the_inbox(with_timers: Path, clock: ManualClock) -> None:
    app = make_app(with_timers, clock, settings=UTC)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timers(app, pilot)
        highlight(screen, "tick")
        await pilot.press("p")
        await pilot_until(pilot, lambda: rows(screen)["tick"][3] == "paused", what="tick paused")
        with reopen(with_timers) as store:
            assert store.timer("tick").paused  # type: ignore[union-attr]
        await pilot.press("p")
        await pilot_until(pilot, lambda: any("already paused" in n.message for n in app._notifications),
                          what="the warning")
        await pilot.press("u")
        await pilot_until(pilot, lambda: rows(screen)["tick"][3] == "active", what="tick resumed")
        clock.advance(7)
        await pilot.press("r")
        await pilot_until(pilot, lambda: any("tick fired" in n.message for n in app._notifications),
                          what="the run-now toast")
        with reopen(with_timers) as store:
            event = store.find_event("timer", f"tick@{clock.now()}")
            timer = store.timer("tick")
        assert event is not None and event.payload["task"] == "tick"
        assert timer is not None and timer.due == clock.now() - 7 + 300  # the schedule is unchanged
        assert rows(screen)["tick"][5] == "now (22:13)"  # last fired
        assert str(screen.query_one("#timers-line").render()).startswith("tick: every 5m00s · catch-up coalesce")


async def test_the_countdowns_move_without_snapping_the_table_back(with_timers: Path, clock: ManualClock) -> None:
    """At 80 columns the schedule is read by scrolling sideways; the once-a-second re-read keeps the scroll and
    the highlighted row while the next fire counts down."""
    app = make_app(with_timers, clock, settings=UTC)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_timers(app, pilot)
        table = screen.query_one(DataTable)
        highlight(screen, "tick")
        await pilot.press("right", "right", "right", "right", "right", "right")
        await pilot_until(pilot, lambda: table.scroll_x > 0, what="the table scrolled sideways")
        scrolled = table.scroll_x
        clock.advance(10)
        await pilot_until(pilot, lambda: rows(screen)["tick"][1] == "in 4m50s (22:18)", what="the countdown moved")
        assert table.scroll_x == scrolled
        assert screen.selected() is not None and screen.selected().id == "tick"  # type: ignore[union-attr]


async def test_an_approvals_expiry_timer_is_not_paused_from_here(with_timers: Path, clock: ManualClock) -> None:
    app = make_app(with_timers, clock, settings=UTC)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_timers(app, pilot)
        highlight(screen, "expire:apr-8-1")
        await pilot.press("p")
        await pilot_until(pilot, lambda: any("answer the approval" in n.message for n in app._notifications),
                          what="the refusal")
        with reopen(with_timers) as store:
            assert not store.timer("expire:apr-8-1").paused  # type: ignore[union-attr]


async def test_the_palette_opens_the_timers_screen(with_timers: Path, clock: ManualClock) -> None:
    app = make_app(with_timers, clock, settings=UTC)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="the engine")
        await pilot.press("ctrl+p")
        await pilot.press(*"show the timers")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, TimersScreen), what="the timers screen")


def ready(app: ConsoleApp) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot_until(pilot, lambda: app.started and app.query_one("#events").page is not None,  # type: ignore[attr-defined]
                          what="first page")
        await app.settle()
        await open_timers(app, pilot)
        highlight(app.screen, "tick")  # type: ignore[arg-type]
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_timers_screen_snapshot(snap_compare: Compare, with_timers: Path, clock: ManualClock,
                                size: tuple[int, int]) -> None:
    app = make_app(with_timers, clock, settings=UTC)
    assert snap_compare(app, terminal_size=size, run_before=ready(app))
