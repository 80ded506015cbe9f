"""Issue 36, item 7: the spend screen ($): 30 days of spend per day as bars, per model, the daily budget across the
chart, today against it and the month's total; live while open (a call settled elsewhere shows), closed with esc."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.core import Store
from console.core.models import BudgetDefaults
from console.tui.app import ConsoleApp
from console.tui.keys import key_rows
from console.tui.screens.spend import SpendScreen
from console.tui.widgets.spend_chart import SpendChart
from tests.support import pilot_until
from tests.tui.scenes import START, make_app
from tests.tui.test_snapshots import ready

Compare = Callable[..., bool]
DAY = 86_400
CENT = 10_000_000  # nano-dollars
SETTINGS = {"daily_budget_usd": 0.5, "monthly_budget_usd": 20.0, "timezone": "UTC"}


def model_call(store: Store, *, at: int, model: str, cost: int | None) -> None:
    """One model call through the ledger, as the agent makes it: reserved, then settled."""
    decision = store.reserve_spend(model=model, worst_nanos=90 * CENT, defaults=BudgetDefaults(), now=at)
    assert decision.reservation_id is not None
    assert store.settle_spend(decision.reservation_id, model=model, cost_nanos=cost, input_tokens=1000,
                              output_tokens=200, cache_write_tokens=0, cache_read_tokens=0, now=at)


def thirty_days(db: Path) -> None:
    """A month of calls on two models (one dear, one cheap), one without a price, and one older than 30 days."""
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "hello"}, now=START - 100)
        for back in range(29, -1, -1):
            at = START - back * DAY
            model_call(store, at=at, model="claude-sonnet-4-5", cost=(back % 7) * 6 * CENT)
            if back % 3 == 0:
                model_call(store, at=at, model="gpt-5-mini", cost=2 * CENT)
        model_call(store, at=START - 5, model="gpt-5-mini", cost=None)
        model_call(store, at=START - 40 * DAY, model="claude-opus-4-1", cost=500 * CENT)


def drawn(app: ConsoleApp, selector: str) -> str:
    return str(app.screen.query_one(selector).render())


def chart_text(app: ConsoleApp) -> str:
    chart = app.screen.query_one(SpendChart)
    return "\n".join(strip.text for strip in chart.render_lines(chart.region.reset_offset))


async def test_dollar_opens_the_spend_per_model_and_it_follows_a_call_settled_elsewhere(db_path: Path) -> None:
    thirty_days(db_path)
    clock = ManualClock(START)
    app = make_app(db_path, clock, settings=SETTINGS)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="engine")
        await pilot.press("dollar_sign")
        await pilot_until(pilot, lambda: isinstance(app.screen, SpendScreen) and app.screen.view is not None,
                          what="the spend screen")
        screen = app.screen
        assert isinstance(screen, SpendScreen) and screen.view is not None
        daily = screen.view.daily
        assert list(daily.nanos) == ["claude-sonnet-4-5", "gpt-5-mini"]  # the opus call is 40 days old
        assert len(daily.days) == 30 and daily.days[-1].isoformat() == "2023-11-14"
        assert daily.nanos["claude-sonnet-4-5"][-1] == 0 and daily.nanos["claude-sonnet-4-5"][-2] == 6 * CENT
        assert daily.unpriced == {"claude-sonnet-4-5": 0, "gpt-5-mini": 1}
        summary = drawn(app, "#spend-summary")
        # today: gpt-5-mini's 2 cents (back 0 is a multiple of 3); the unpriced call makes today unknown
        assert "today unknown of $0.50" in summary and "this month" in summary and "of $20.00" in summary
        models = drawn(app, "#spend-models")
        assert "claude-sonnet-4-5  $5.10 in 30 days" in models  # (0+6+…+36 cents) × 4 weeks + 0 + 6
        assert "gpt-5-mini  $0.20 in 30 days · today $0.02 · 1 call without a price" in models
        chart = chart_text(app)
        assert "█" in chart and "day of the month · ─ the daily budget" in chart
        assert "0.50" in chart or "0.5" in chart.replace("0.50", "0.5")  # the budget's height is on the axis

        with Store.open(db_path) as store:  # another process's call settles: the screen reads it at once
            model_call(store, at=START, model="claude-sonnet-4-5", cost=45 * CENT)
        await pilot_until(pilot, lambda: "today $0.45" in drawn(app, "#spend-models"), what="the new call")

        await pilot.press("m")
        await pilot_until(pilot, lambda: "▸ ■ claude-sonnet-4-5" in drawn(app, "#spend-models"), what="one model")
        assert screen.model == "claude-sonnet-4-5"
        await pilot.press("m", "m")
        await pilot_until(pilot, lambda: screen.model is None, what="all models again")
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, SpendScreen), what="closed")


async def test_without_calls_the_screen_says_so_and_draws_no_chart(db_path: Path) -> None:
    with Store.open(db_path) as store:
        store.ingest("chat", "m1", {"text": "hello"}, now=START - 100)
    app = make_app(db_path, ManualClock(START), settings={"timezone": "UTC"})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="engine")
        await pilot.press("dollar_sign")
        await pilot_until(pilot, lambda: isinstance(app.screen, SpendScreen) and app.screen.view is not None,
                          what="the spend screen")
        assert "No model calls in the last 30 days." in drawn(app, "#spend-models")
        assert not app.screen.query_one(SpendChart).display
        assert "today $0.00 (no budget)" in drawn(app, "#spend-summary")


def test_the_key_is_in_the_help() -> None:
    rows = [row for row in key_rows({}) if row.binding_id == "console.spend"]
    assert [(row.place, row.keys, row.does) for row in rows] == [("Main screen", "$", "Spend")]
    assert [row.keys for row in key_rows({}) if row.binding_id == "spend.model"] == ["m"]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_spend_screen_snapshot(snap_compare: Compare, db_path: Path, size: tuple[int, int]) -> None:
    thirty_days(db_path)
    app = make_app(db_path, ManualClock(START), settings=SETTINGS)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app, "dollar_sign", screen=SpendScreen)(pilot)
        await pilot_until(pilot, lambda: app.screen.view is not None, what="read")  # type: ignore[attr-defined]
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
