"""An idle console draws, each second, only what the clock moved on screen: on an inbox where nothing happens
but the lease counting down (done events minutes old, an approval an hour from its deadline, a message sent an
hour ago), ten seconds redraw the lease's countdown line once (a lease this console holds and renews counts in
steps of ten seconds) and nothing else, and lay nothing out. The line under the events table was updated, and the
whole screen laid out again, every second (issue 22's idle CPU); then the countdown, every second."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widget import Widget

from console.clock import ManualClock
from console.core import Store
from console.core.models import Lease
from console.tui.app import ConsoleApp
from console.tui.reads import LeaseView
from console.tui.widgets.events_table import EventsTable
from console.tui.widgets.lease_pane import LeasePane, LeasePaneView
from tests.support import pilot_until
from tests.tui.scenes import START, make_app, started

SIZE = (120, 40)


@pytest.fixture
def quiet(db_path: Path, clock: ManualClock) -> Path:
    now = clock.now()
    with Store.open(db_path) as store:
        store.ingest_many([("chat", f"c-{i}", {"text": f"message {i}"}) for i in range(40)], now=now - 120)
        store.connection.execute("UPDATE inbox SET status = 'done', attempts = 1, claim_gen = 1")
        store.request_approval("apr-idle", "refund order 881", now=now - 90, expires_in=3600)  # 58m30s left
        store.queue_message("sent an hour ago", now=now - 3600)
        store.dispatch(lambda batch: None, now=now - 3600, channel="console")
    return db_path


async def quiet_app(app: ConsoleApp, pilot: Pilot[None]) -> None:
    """The console started, its engine's notices stopped, every pane read and drawn, no toast."""
    await started(app, pilot)
    # The worker takes the lease after the engine has started: the header and the lease pane say so once read.
    await pilot_until(pilot, lambda: app.engine.mode == "active", what="the lease held")
    # Nothing happens in this inbox but what the engine's start-up committed, and the change feed tells the
    # console of that too, in its own time: under load the panes' reads it set off landed among the five
    # seconds (the events table's 207 cells redrawn, the failure seen once under -n 2). The notices stop
    # here, and whatever they marked is read before counting; what the ticks mark is still read, and counted.
    assert app._unsubscribe is not None
    app._unsubscribe()
    app._unsubscribe = None
    await pilot.pause()  # a notice already posted is handled
    await pilot_until(pilot, lambda: not app._dirty and not app._busy and not app._flush_due, what="quiet panes")
    await app.settle()  # every pane as it stands now, the engine's mode included
    app.clear_notifications()  # a toast leaves after seconds of real time: no part of a quiet second
    await pilot.pause()


def count_refreshes(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, bool]]:
    """Every widget's refresh from now on, by (type#id, whether it asked for a layout)."""
    redrawn: Counter[tuple[str, bool]] = Counter()
    refresh = Widget.refresh

    def counted(self: Widget, *regions: object, layout: bool = False, **options: bool) -> Widget:
        redrawn[(f"{type(self).__name__}#{self.id}", layout)] += 1
        return refresh(self, *regions, layout=layout, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(Widget, "refresh", counted)
    return redrawn


async def test_a_quiet_second_redraws_only_the_lease_countdown(
    quiet: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(quiet, clock)
    async with app.run_test(size=SIZE) as pilot:
        await quiet_app(app, pilot)
        redrawn = count_refreshes(monkeypatch)
        lease = app.query_one(LeasePane).view
        assert lease is not None and lease.data.lease is not None
        assert lease.data.lease.until - clock.now() == 120  # just taken: 2m00s left
        for _ in range(10):  # the ages of minute-old events move at a whole ten, and show the same minutes
            clock.advance(1)
            app._tick()
            await pilot.pause()
        # 2m00s → 1m50s at the first second (1m59s left, shown rounded down), the same for the next nine
        assert redrawn == Counter({("CountdownBar#lease-left", False): 1})
        assert "1m50s" in str(app.query_one("#lease-left").render())  # 1m50s left, ten seconds on
        clock.advance(1)
        app._tick()
        await pilot.pause()
        assert "1m40s" in str(app.query_one("#lease-left").render())  # 1m49s left
        assert redrawn == Counter({("CountdownBar#lease-left", False): 2})


def lease_view(mode: str, holder: str, until: int, *, ttl: int = 120) -> LeasePaneView:
    data = LeaseView(now=START, lease=Lease(holder, 3, until, START - 60, START - 30), takeovers=0, refused=0,
                     recent_refusals=[], log=[])
    return LeasePaneView(data, mode, "console-test", ttl)


@pytest.mark.parametrize(("mode", "holder", "left", "shown"), [
    ("active", "console-test", 120, 120),
    ("active", "console-test", 119, 110),  # renewed and held: steps of ten seconds, rounded down
    ("active", "console-test", 61, 60),
    ("active", "console-test", 60, 60),  # half the TTL: a renewal is late, every second counts
    ("active", "console-test", 59, 59),
    ("stalled", "console-test", 119, 119),  # not renewed: it lapses at the end of it
    ("standby", "worker-b:4242", 119, 119),  # another's: this console takes over when it lapses
    ("active", "console-test", 0, 0),
])
def test_the_lease_countdown_counts_seconds_only_where_they_matter(
    mode: str, holder: str, left: int, shown: int
) -> None:
    view = lease_view(mode, holder, START + left)
    assert view.left_shown(START) == shown


def test_a_short_lease_counts_its_seconds_and_never_reads_zero_while_renewed() -> None:
    """A lease_ttl under twenty seconds: more than half the TTL left can be under one step, shown as it is."""
    for left, shown in ((12, 10), (11, 10), (9, 9), (7, 7)):  # ttl 12 renews every 4 s: 8-12 s left
        assert lease_view("active", "console-test", START + left, ttl=12).left_shown(START) == shown


def test_a_renewed_lease_keeps_its_view_between_steps() -> None:
    """Nothing the pane shows moves between two steps: the same view (no watcher runs, nothing is redrawn)."""
    view = lease_view("active", "console-test", START + 119)
    assert view.at(START + 8) is view  # 1m51s left: still 1m50s
    assert view.at(START + 10).left_shown(START + 10) == 100  # 1m49s: 1m40s, a new view
    other = lease_view("standby", "worker-b:4242", START + 119)
    assert other.at(START + 1) is not other


async def test_reading_the_panes_again_when_nothing_changed_redraws_nothing(
    quiet: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that changes nothing the panes show (the engine renewing its lease every third of its TTL, a
    write another process made elsewhere in the file) has every pane read again: the same page of events is
    drawn without touching a cell (each re-read rewrote every cell of the page, 207 at 120x40, and repainted the
    whole pane)."""
    app = make_app(quiet, clock)
    async with app.run_test(size=SIZE) as pilot:
        await quiet_app(app, pilot)
        clock.advance(1)  # a second on: the views read differ from those shown (their `now`), what they show not
        redrawn = count_refreshes(monkeypatch)
        for pane in ("events", "approvals", "outbox", "header"):  # the lease's countdown moved: it redraws
            await app._reload_pane(pane)
        await pilot.pause()
        redrawn.pop(("CountdownBar#lease-left", False), None)  # the app's own tick, if its real second came
        assert redrawn == Counter()


async def test_ages_past_a_minute_move_together_at_the_whole_minute(
    quiet: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed cell redraws every row of the events table: ages out of phase (events not all stored in the same
    second) turned some row's minute in nearly every ten-second step, a whole-table redraw each (0.71% of a core
    idle on an hour of events, one every 67 s). They move once a minute now, all at the whole minute."""
    app = make_app(quiet, clock)
    async with app.run_test(size=SIZE) as pilot:
        await quiet_app(app, pilot)
        table = app.query_one(EventsTable)
        first = next(iter(table.rows)).value
        assert START % 60 == 20 and str(table.get_cell(first, "age")) == "2m"  # stored 120 s before START
        clock.advance(60)  # 3m00s old at 20 s past a whole minute (a whole ten: ages moved here before)
        redrawn = count_refreshes(monkeypatch)
        app._tick()
        await pilot.pause()
        assert str(table.get_cell(first, "age")) == "2m"
        assert ("EventsTable#events-table", False) not in redrawn
        clock.advance(40)  # the whole minute: every age brought up to date at once
        app._tick()
        await pilot.pause()
        assert str(table.get_cell(first, "age")) == "3m"
        assert redrawn[("EventsTable#events-table", False)] >= 1


async def test_a_new_events_age_redraws_its_row_alone(quiet: Path, clock: ManualClock,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: in the minute after an event arrives its age moves every second, and DataTable.update_cell
    refreshed the whole table for it (17-25x the do-nothing app idle). Now only the changed row's line is
    refreshed, and it shows the new age."""
    app = make_app(quiet, clock)
    async with app.run_test(size=SIZE) as pilot:
        await quiet_app(app, pilot)
        with Store.open(quiet, check=False) as other:
            other.ingest("chat", "fresh", {"text": "just now"}, now=clock.now())
        await app.settle()
        table = app.query_one(EventsTable)
        fresh = next(iter(table.rows)).value
        assert fresh is not None and str(table.get_cell(fresh, "age")) == "0s"
        await pilot.pause()
        regions: list[tuple[object, ...]] = []
        refresh = Widget.refresh

        def noted(self: Widget, *args: object, **options: bool) -> Widget:
            if isinstance(self, EventsTable):
                regions.append(args)
            return refresh(self, *args, **options)  # type: ignore[arg-type]

        monkeypatch.setattr(Widget, "refresh", noted)
        clock.advance(3)
        app._tick()
        await pilot.pause()
        assert str(table.get_cell(fresh, "age")) == "3s"
        assert regions and all(len(args) == 1 for args in regions)  # a region each time, never the whole table
        assert all(getattr(args[0], "height", None) == 1 for args in regions)  # one line: the row's
        assert "just now" in table.render_line(table.header_height).text  # drawn again from the new cells
        assert "3s" in table.render_line(table.header_height).text
