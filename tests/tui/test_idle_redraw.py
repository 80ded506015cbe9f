"""An idle console draws, each second, only what the clock moved on screen: on an inbox where nothing happens
but the lease counting down (done events minutes old, an approval an hour from its deadline, a message sent an
hour ago), a second redraws the lease's countdown line and nothing else, and lays nothing out. The line under
the events table was updated, and the whole screen laid out again, every second (issue 22's idle CPU)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widget import Widget

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from tests.support import pilot_until
from tests.tui.scenes import make_app, started

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
        for _ in range(5):  # seconds 1..5 after a whole ten: no age of a minute-old event moves
            clock.advance(1)
            app._tick()
            await pilot.pause()
        assert redrawn == Counter({("CountdownBar#lease-left", False): 5})
        assert "1m55s" in str(app.query_one("#lease-left").render())  # it did count down: 2m00s, five seconds on


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
