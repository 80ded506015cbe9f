"""The spend ledger and the budgets: reservations checked and written in one transaction, in the owner's days
and months, on a real inbox file (concurrent reservations from real threads, each with its own connection)."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from console.core import StaleGeneration, Store
from console.core.models import AgentState, BudgetDefaults
from console.core.spend import period

ZONE = "Europe/Berlin"
# 2026-03-28 12:00 in Berlin; the clocks go forward the next night, so the 29th is 23 hours long.
NOON = int(datetime(2026, 3, 28, 12, 0, tzinfo=ZoneInfo(ZONE)).timestamp())
CENT = 10_000_000  # nano-dollars


def local(text: str, zone: str = ZONE) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp())


def reserve(store: Store, worst: int | None, defaults: BudgetDefaults, now: int = NOON, **where: object) -> int | None:
    decision = store.reserve_spend(model="m", worst_nanos=worst, defaults=defaults, now=now, **where)  # type: ignore[arg-type]
    return decision.reservation_id


def settle(store: Store, reservation: int, cost: int | None, now: int = NOON) -> None:
    assert store.settle_spend(reservation, model="m", cost_nanos=cost, input_tokens=100, output_tokens=10,
                              cache_write_tokens=5, cache_read_tokens=50, now=now)


def test_days_and_months_are_the_owners() -> None:
    assert period("daily", NOON, ZONE) == (local("2026-03-28T00:00"), local("2026-03-29T00:00"))
    start, end = period("daily", local("2026-03-29T12:00"), ZONE)
    assert end - start == 23 * 3600  # the day the clocks go forward
    assert period("monthly", NOON, ZONE) == (local("2026-03-01T00:00"), local("2026-04-01T00:00"))
    assert period("monthly", local("2026-12-31T23:59"), ZONE)[1] == local("2027-01-01T00:00")
    # 23:30 on the 31st in New York is already the 1st in UTC: it belongs to the owner's January.
    new_years_eve = local("2026-01-31T23:30", "America/New_York")
    assert period("monthly", new_years_eve, "America/New_York")[0] == local("2026-01-01T00:00", "America/New_York")
    assert period("monthly", new_years_eve, "UTC")[0] == local("2026-02-01T00:00", "UTC")


def test_a_reservation_that_would_pass_the_budget_is_refused_until_the_day_rolls_over(store: Store) -> None:
    defaults = BudgetDefaults(daily_usd=0.05, zone=ZONE)
    first = reserve(store, 3 * CENT, defaults)
    assert first is not None
    assert store.spent("daily", zone=ZONE, now=NOON) == 3 * CENT  # held at its worst case while in flight
    refused = store.reserve_spend(model="m", worst_nanos=3 * CENT, defaults=defaults, now=NOON)
    assert refused.reservation_id is None and refused.refused is not None
    assert (refused.refused.kind, refused.spent_nanos, refused.until) == ("daily", 3 * CENT, local("2026-03-29T00:00"))

    settle(store, first, 1 * CENT)  # it cost less than its worst case: room for another
    assert store.spent("daily", zone=ZONE, now=NOON) == 1 * CENT
    second = reserve(store, 4 * CENT, defaults)
    assert second is not None  # exactly at the budget is within it
    assert reserve(store, 1, defaults) is None
    assert reserve(store, 3 * CENT, defaults, now=local("2026-03-29T00:00")) is not None  # a new day


def test_the_monthly_budget_counts_the_whole_month(store: Store) -> None:
    defaults = BudgetDefaults(monthly_usd=0.10, zone=ZONE)
    for day in range(1, 10):
        reservation = reserve(store, CENT, defaults, now=local(f"2026-03-{day:02d}T10:00"))
        assert reservation is not None
        settle(store, reservation, CENT)
    assert reserve(store, 2 * CENT, defaults, now=NOON) is None
    decision = store.reserve_spend(model="m", worst_nanos=2 * CENT, defaults=defaults, now=NOON)
    assert decision.refused is not None and decision.refused.kind == "monthly"
    assert decision.until == local("2026-04-01T00:00")
    assert reserve(store, 2 * CENT, defaults, now=local("2026-04-01T00:00")) is not None


def test_a_refused_call_releases_its_reservation_and_an_abandoned_one_stays_counted(store: Store) -> None:
    defaults = BudgetDefaults(daily_usd=1.0, zone=ZONE)
    refused_by_the_api = reserve(store, 5 * CENT, defaults)
    abandoned = reserve(store, 7 * CENT, defaults)
    assert refused_by_the_api is not None and abandoned is not None
    assert store.release_spend(refused_by_the_api)
    assert not store.release_spend(refused_by_the_api)
    assert store.spent("daily", zone=ZONE, now=NOON) == 7 * CENT  # the worker died mid-call: worst case held
    summary = store.spend_summary(defaults, now=NOON)
    assert summary["today_usd"] == pytest.approx(0.07)


def test_a_budget_stored_in_the_inbox_wins_over_the_settings_until_cleared(store: Store) -> None:
    defaults = BudgetDefaults(daily_usd=0.01, monthly_usd=5.0, daily_from="config file /c.toml",
                              monthly_from="environment variable AGENT_CONSOLE_MONTHLY_BUDGET_USD", zone=ZONE)
    assert reserve(store, 2 * CENT, defaults) is None
    store.set_budget("daily", 0.5, now=NOON)
    budgets = store.budgets(defaults)
    assert (budgets["daily"].usd, budgets["daily"].source, budgets["daily"].set_at) == (0.5, "inbox", NOON)
    assert (budgets["monthly"].usd, budgets["monthly"].source) == (5.0, defaults.monthly_from)
    assert reserve(store, 2 * CENT, defaults) is not None
    store.set_budget("daily", 0, now=NOON)  # 0 stored: no daily limit, whatever the config says
    summary = store.spend_summary(defaults, now=NOON)
    assert summary["daily_budget_usd"] is None and summary["daily_budget_from"] == "inbox"
    assert summary["monthly_budget_usd"] == 5.0
    assert store.clear_budgets() == 1
    assert store.budgets(defaults)["daily"].source == "config file /c.toml"
    with pytest.raises(ValueError, match="daily budget must be between 0"):
        store.set_budget("daily", -1, now=NOON)
    with pytest.raises(ValueError, match="unknown budget 'weekly'"):
        store.set_budget("weekly", 1, now=NOON)


def test_a_model_with_no_price_has_an_unknown_cost_never_zero(store: Store) -> None:
    unlimited = BudgetDefaults(zone=ZONE)
    reservation = reserve(store, None, unlimited)
    assert reservation is not None  # no budget: the call is made, its cost unknown
    settle(store, reservation, None)
    assert store.spent("daily", zone=ZONE, now=NOON) is None
    assert store.spend_summary(unlimited, now=NOON)["today_usd"] is None
    limited = BudgetDefaults(daily_usd=1.0, zone=ZONE)
    decision = store.reserve_spend(model="m", worst_nanos=None, defaults=limited, now=NOON + 1)
    assert decision.reservation_id is None and decision.unpriced
    # A priced call is refused too while the day's spend is unknown: a budget cannot be kept blind.
    blind = store.reserve_spend(model="m", worst_nanos=CENT, defaults=limited, now=NOON + 1)
    assert blind.refused is not None and blind.spent_nanos is None


def test_a_run_that_lost_its_lease_cannot_reserve(store: Store) -> None:
    store.ingest("chat", "m1", {}, now=NOON)
    gen = store.acquire("w1", now=NOON)
    assert gen is not None
    defaults = BudgetDefaults(zone=ZONE)
    assert reserve(store, CENT, defaults, holder="w1", gen=gen, event_id=1, step_key="claude:1:turn:1") is not None
    assert store.acquire("w2", now=NOON + store.options.lease_ttl + 1) == gen + 1
    with pytest.raises(StaleGeneration, match="model call of 'claude:1:turn:1'"):
        reserve(store, CENT, defaults, now=NOON + store.options.lease_ttl + 1, holder="w1", gen=gen, event_id=1,
                step_key="claude:1:turn:1")
    (refusal,) = store.refused_finishes(5)
    assert (refusal.kind, refusal.detail) == ("reserve", "claude:1:turn:1")


def test_concurrent_reservations_never_pass_the_budget_together(db_path: Path) -> None:
    """Eight threads, each with its own connection to the file, race for a budget that holds five calls."""
    Store.open(db_path).close()
    defaults = BudgetDefaults(daily_usd=0.05, zone=ZONE)
    start = threading.Barrier(8)
    granted: list[int] = []
    lock = threading.Lock()

    def racer() -> None:
        with Store.open(db_path) as store:
            start.wait()
            for _ in range(5):
                reservation = reserve(store, CENT, defaults)
                if reservation is not None:
                    with lock:
                        granted.append(reservation)

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(granted) == 5
    with Store.open(db_path) as store:
        assert store.spent("daily", zone=ZONE, now=NOON) == 5 * CENT


def test_usage_is_added_up_per_owners_day_source_and_event(store: Store) -> None:
    defaults = BudgetDefaults(zone=ZONE)
    store.ingest("chat", "m1", {}, now=NOON)
    store.ingest("github", "d1", {}, now=NOON)
    calls = [(1, local("2026-03-27T23:30"), CENT), (1, NOON, 2 * CENT), (2, NOON + 60, 5 * CENT), (2, NOON + 61, None)]
    for event_id, at, cost in calls:
        reservation = reserve(store, CENT, defaults, now=at, event_id=event_id)
        assert reservation is not None
        settle(store, reservation, cost, now=at)
    report = store.usage_report(days=2, zone=ZONE, now=NOON + 120)
    assert [(d["date"], d["calls"], d["cost_usd"]) for d in report["days"]] == [
        ("2026-03-27", 1, pytest.approx(0.01)), ("2026-03-28", 3, None)]  # one call of the 28th has no price
    assert report["days"][1]["unpriced_calls"] == 1 and report["days"][1]["input_tokens"] == 300
    assert [(s["source"], s["calls"], s["cost_usd"]) for s in report["sources"]] == [
        ("chat", 2, pytest.approx(0.03)), ("github", 2, None)]
    assert [(e["event_id"], e["source_id"]) for e in report["top_events"]] == [(1, "m1"), (2, "d1")]
    assert store.usage_report(days=1, zone=ZONE, now=NOON + 120)["days"][0]["calls"] == 3
    assert [row.cost_nanos for row in store.event_spend(1)] == [CENT, 2 * CENT]


def test_a_budget_pause_lifts_when_its_period_rolls_over_or_its_budget_changes(store: Store) -> None:
    defaults = BudgetDefaults(daily_usd=0.05, zone=ZONE)
    end = local("2026-03-29T00:00")
    pause = AgentState("paused", "daily budget reached", end, NOON, "w1", 1, cause={"budget": "daily",
                                                                                   "limit_usd": 0.05})
    assert pause.budget == "daily"
    assert not store.budget_pause_lifted(pause, defaults, now=NOON)
    assert store.budget_pause_lifted(pause, defaults, now=end)
    assert pause.at(end).state == "ready" and pause.at(end - 1).state == "paused"
    store.set_budget("daily", 0.06, now=NOON)
    assert store.budget_pause_lifted(pause, defaults, now=NOON)
    store.set_budget("monthly", 1, now=NOON)  # another budget's change does not lift it
    store.set_budget("daily", 0.05, now=NOON)
    assert not store.budget_pause_lifted(pause, defaults, now=NOON)


def test_calls_without_a_price_are_listed_for_repricing_and_priced_once(store: Store) -> None:
    unlimited = BudgetDefaults(zone=ZONE)
    settled = reserve(store, None, unlimited)
    assert settled is not None
    settle(store, settled, None)
    in_flight = store.reserve_spend(model="m", worst_nanos=None, defaults=unlimited, now=NOON, prompt_tokens=900,
                                    max_tokens=64).reservation_id
    priced = reserve(store, CENT, unlimited)
    found = {call.id: call for call in store.unpriced_spend()}
    assert set(found) == {settled, in_flight} and priced not in found
    assert (found[settled].state, found[settled].input_tokens, found[settled].asked_model) == ("settled", 100, "m")
    assert (found[in_flight].prompt_tokens, found[in_flight].max_tokens) == (900, 64)
    assert store.spent("daily", zone=ZONE, now=NOON) is None
    assert in_flight is not None
    assert store.price_spend([(settled, 3 * CENT), (in_flight, 2 * CENT)]) == 2
    assert store.price_spend([(settled, 99 * CENT)]) == 0  # priced already: it keeps its price
    assert store.unpriced_spend() == []
    assert store.spent("daily", zone=ZONE, now=NOON) == 6 * CENT


def test_accepting_the_unknown_spend_lets_the_budget_be_kept_again_fenced(store: Store) -> None:
    reservation = reserve(store, None, BudgetDefaults(zone=ZONE))
    assert reservation is not None
    settle(store, reservation, None)
    limited = BudgetDefaults(daily_usd=1.0, zone=ZONE)
    assert store.reserve_spend(model="m", worst_nanos=CENT, defaults=limited, now=NOON + 5).spent_nanos is None
    gen = store.acquire("w1", now=NOON + 5)
    assert gen is not None
    assert not store.accept_unknown_spend("w2", gen, "daily", now=NOON + 5)  # not the lease holder
    assert store.accept_unknown_spend("w1", gen, "daily", now=NOON + 5)
    assert reserve(store, CENT, limited, now=NOON + 6) is not None
    assert store.spent("daily", zone=ZONE, now=NOON + 6) is None  # still unknown in what the owner reads
    monthly = BudgetDefaults(monthly_usd=30.0, zone=ZONE)
    assert store.reserve_spend(model="m", worst_nanos=CENT, defaults=monthly, now=NOON + 7).spent_nanos is None
