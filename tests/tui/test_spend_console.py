"""The console shows what the agent spends: today's spend against the daily budget in the header, each run's
tokens and cost in the event detail; and sets the budgets as `agent-console budget` does."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from console.clock import ManualClock
from console.core import Store
from console.core.models import BudgetDefaults
from console.tui.app import ConsoleApp
from console.tui.screens.budget import BudgetScreen
from console.tui.screens.detail import DetailScreen
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import START, make_app

SIZE = (100, 30)
CENT = 10_000_000  # nano-dollars


def call(store: Store, event_id: int, *, holder: str, gen: int, run_at: int, cost: int | None, model: str = "m",
         tokens: tuple[int, int, int, int] = (1000, 200, 300, 500)) -> None:
    decision = store.reserve_spend(model=model, worst_nanos=5 * CENT, defaults=BudgetDefaults(), now=run_at,
                                   event_id=event_id, step_key=f"claude:{event_id}:turn:1", run_at=run_at)
    assert decision.reservation_id is not None
    given, output, written, read = tokens
    assert store.settle_spend(decision.reservation_id, model=model, cost_nanos=cost, input_tokens=given,
                              output_tokens=output, cache_write_tokens=written, cache_read_tokens=read, now=run_at)
    # The rows say which run made them: holder and generation as the agent records them.
    store.connection.execute("UPDATE spend SET holder = ?, gen = ? WHERE id = ?",
                             (holder, gen, decision.reservation_id))


def spent_inbox(db: Path) -> None:
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "what's on today?"}, now=START - 100)
        call(store, 1, holder="w1", gen=1, run_at=START - 90, cost=2 * CENT)
        call(store, 1, holder="w1", gen=1, run_at=START - 90, cost=CENT)
        call(store, 1, holder="w2", gen=2, run_at=START - 30, cost=None, model="claude-nonesuch-9")


def header(app: ConsoleApp) -> str:
    return str(app.query_one("#header-title").render())


async def test_the_header_shows_todays_spend_against_the_budget_and_b_sets_it(db_path: Path) -> None:
    with Store.open(db_path) as store:
        store.ingest("chat", "m1", {}, now=START - 100)
        call(store, 1, holder="w1", gen=1, run_at=START - 90, cost=4 * CENT)
    clock = ManualClock(START)
    app = make_app(db_path, clock, settings={"daily_budget_usd": 0.05, "timezone": "UTC"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: app.started and "today $0.04 of $0.05" in header(app), what="spend shown")
        await pilot.press("b")
        await pilot_until(pilot, lambda: isinstance(app.screen, BudgetScreen), what="budget dialog")
        assert app.screen.query_one("#budget-daily", Input).value == "0.05"
        assert app.screen.query_one("#budget-monthly", Input).value == "0"
        app.screen.query_one("#budget-daily", Input).value = "lots"
        await pilot.press("ctrl+s")
        await pilot_until(pilot, lambda: "is not a number" in str(app.screen.query_one("#budget-error").render()))
        app.screen.query_one("#budget-daily", Input).value = "2.5"
        await pilot.press("ctrl+s")
        await pilot_until(pilot, lambda: not isinstance(app.screen, BudgetScreen), what="dialog closed")
        await pilot_until(pilot, lambda: "today $0.04 of $2.50" in header(app), what="the raised budget")
    with reopen(db_path) as store:
        budgets = store.budgets(BudgetDefaults(daily_usd=0.05))
        assert (budgets["daily"].usd, budgets["daily"].source) == (2.5, "inbox")
        assert budgets["monthly"].source == "default"  # untouched in the form: not stored


async def test_the_event_detail_shows_each_runs_tokens_and_cost(db_path: Path) -> None:
    spent_inbox(db_path)
    clock = ManualClock(START)
    app = make_app(db_path, clock, settings={"timezone": "UTC"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: app.started, what="engine")
        await app.settle()
        assert "today unknown" in header(app)  # a call today has no price: not $0.03
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        spend = str(app.screen.query_one("#detail-spend").render())
        first, second = [line for line in spend.splitlines() if line.startswith("run ")]
        assert "w1 gen 1" in first and "w2 gen 2" in second
        assert "2 calls · 2,000 in · 1,000 cache read · 600 cache write · 400 out · $0.03" in spend
        assert "1 call · 1,000 in · 500 cache read · 300 cache write · 200 out · cost unknown (no price for " \
               "claude-nonesuch-9)" in spend
