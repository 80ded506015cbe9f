"""An idle console draws, each second, only what the clock moved on screen: on an inbox where nothing happens
but the lease counting down (done events minutes old, an approval an hour from its deadline, a message sent an
hour ago), a second redraws the lease's countdown line and nothing else, and lays nothing out. The line under
the events table was updated, and the whole screen laid out again, every second (issue 22's idle CPU)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from textual.widget import Widget

from console.clock import ManualClock
from console.core import Store
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


async def test_a_quiet_second_redraws_only_the_lease_countdown(
    quiet: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(quiet, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        # Nothing happens in this inbox but what the engine's start-up committed, and the change feed tells the
        # console of that too, in its own time: under load the panes' reads it set off landed among the five
        # seconds (the events table's 207 cells redrawn, the failure seen once under -n 2). The notices stop
        # here, and whatever they marked is read before counting; what the ticks mark is still read, and counted.
        assert app._unsubscribe is not None
        app._unsubscribe()
        app._unsubscribe = None
        await pilot.pause()  # a notice already posted is handled
        await pilot_until(pilot, lambda: not app._dirty and not app._busy and not app._flush_due, what="quiet panes")
        app.clear_notifications()  # a toast leaves after seconds of real time: no part of a quiet second
        await pilot.pause()
        redrawn: Counter[tuple[str, bool]] = Counter()
        refresh = Widget.refresh

        def counted(self: Widget, *regions: object, layout: bool = False, **options: bool) -> Widget:
            redrawn[(f"{type(self).__name__}#{self.id}", layout)] += 1
            return refresh(self, *regions, layout=layout, **options)  # type: ignore[arg-type]

        monkeypatch.setattr(Widget, "refresh", counted)
        for _ in range(5):  # seconds 1..5 after a whole ten: no age of a minute-old event moves
            clock.advance(1)
            app._tick()
            await pilot.pause()
        assert redrawn == Counter({("CountdownBar#lease-left", False): 5})
        assert "1m55s" in str(app.query_one("#lease-left").render())  # it did count down: 2m00s, five seconds on
