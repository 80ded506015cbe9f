"""Issue 36, item 7 (its first picture): today's spend against the daily budget as a gauge beside the sparkline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.reads import SpendView
from console.tui.widgets.console_header import spend_gauge
from tests.support import pilot_until
from tests.tui.scenes import START, make_app
from tests.tui.test_snapshots import Compare, ready
from tests.tui.test_spend_console import CENT, call


def gauge(app: ConsoleApp) -> str:
    return str(app.query_one("#header-spend").render())


@pytest.mark.parametrize(("today", "shown"), [
    (0.0, " $ ▱▱▱▱▱▱▱▱ 0% "), (0.001, " $ ▰▱▱▱▱▱▱▱ 2% "), (0.04, " $ ▰▰▰▰▰▰▱▱ 80% "), (0.07, " $ ▰▰▰▰▰▰▰▰ 140% "),
    (None, " $ ? "),
])
def test_the_gauge_fills_with_the_share_of_the_budget(today: float | None, shown: str) -> None:
    assert str(spend_gauge(SpendView(today_usd=today, daily_budget_usd=0.05))) == shown


def test_no_daily_budget_no_gauge() -> None:
    assert str(spend_gauge(SpendView(today_usd=3.0, daily_budget_usd=None))) == ""


def spent(db: Path) -> None:
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "what's on today?"}, now=START - 100)
        call(store, 1, holder="w1", gen=1, run_at=START - 90, cost=4 * CENT)


async def test_the_header_shows_the_gauge_and_it_moves_with_the_spend(db_path: Path) -> None:
    spent(db_path)
    clock = ManualClock(START)
    app = make_app(db_path, clock, settings={"daily_budget_usd": 0.05, "timezone": "UTC"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.started and "80%" in gauge(app), what="the gauge at 80%")
        assert "▰▰▰▰▰▰▱▱" in gauge(app)
        with Store.open(db_path, check=False) as other:
            call(other, 1, holder="w1", gen=1, run_at=START - 10, cost=2 * CENT)
        await pilot_until(pilot, lambda: "120%" in gauge(app), what="the gauge past the budget")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_spend_gauge_snapshot(snap_compare: Compare, db_path: Path, size: tuple[int, int]) -> None:
    spent(db_path)
    app = make_app(db_path, ManualClock(START), settings={"daily_budget_usd": 0.05, "timezone": "UTC"})

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        await pilot_until(pilot, lambda: "80%" in gauge(app), what="the gauge")

    assert snap_compare(app, terminal_size=size, run_before=run_before)
