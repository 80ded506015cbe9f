"""`agent-console budget`, `usage`, and the spend in `status` and `show`, on a real inbox file."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from console.core import Store
from console.core.models import BudgetDefaults
from tests.cli.helpers import assert_user_error, invoke

CENT = 10_000_000  # nano-dollars


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def spend(db: Path, event_id: int | None, at: int, cost: int | None, model: str = "claude-sonnet-5-5") -> None:
    with Store.open(db) as store:
        decision = store.reserve_spend(model=model, worst_nanos=CENT, defaults=BudgetDefaults(), now=at,
                                       event_id=event_id, run_at=at)
        assert decision.reservation_id is not None
        store.settle_spend(decision.reservation_id, model=model, cost_nanos=cost, input_tokens=1200,
                           output_tokens=300, cache_write_tokens=0, cache_read_tokens=4000, now=at)


def test_budget_shows_sets_and_clears_and_says_where_each_came_from(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    conf = config(tmp_path, "daily_budget_usd = 2.5\n")
    env = {"AGENT_CONSOLE_MONTHLY_BUDGET_USD": "40"}
    base = ["--db", str(db), "--config", str(conf)]
    assert invoke([*base, "ingest", "chat", "m1"], env=env).exit_code == 0
    shown = invoke([*base, "budget"], env=env)
    assert shown.exit_code == 0
    assert shown.output.splitlines() == [
        f"daily    $2.50      from config file {conf}; spent today $0.00",
        "monthly  $40.00     from environment variable AGENT_CONSOLE_MONTHLY_BUDGET_USD; spent this month $0.00"]

    stored = invoke([*base, "budget", "--daily", "5", "--json"], env=env)
    assert stored.exit_code == 0
    contract = json.loads(stored.output)
    assert (contract["daily_budget_usd"], contract["daily_budget_from"]) == (5.0, "inbox")
    assert (contract["monthly_budget_usd"], contract["monthly_budget_from"]) == (
        40.0, "environment variable AGENT_CONSOLE_MONTHLY_BUDGET_USD")
    status = json.loads(invoke([*base, "status", "--json"], env=env).output)["spend"]
    assert status == {"today_usd": 0.0, "month_usd": 0.0, "daily_budget_usd": 5.0, "monthly_budget_usd": 40.0,
                      "daily_budget_from": "inbox",
                      "monthly_budget_from": "environment variable AGENT_CONSOLE_MONTHLY_BUDGET_USD",
                      "zone": status["zone"]}
    human = invoke([*base, "status"], env=env).output
    assert "spend      today $0.00 of $5.00 (budget from the inbox: agent-console budget) · this month $0.00 of " \
           "$40.00 (budget from environment variable AGENT_CONSOLE_MONTHLY_BUDGET_USD)" in human

    assert invoke([*base, "budget", "--monthly", "0"], env=env).exit_code == 0  # stored: no monthly limit
    status = json.loads(invoke([*base, "status", "--json"], env=env).output)["spend"]
    assert (status["monthly_budget_usd"], status["monthly_budget_from"]) == (None, "inbox")

    cleared = invoke([*base, "budget", "--clear"], env=env)
    assert cleared.output.splitlines()[0] == "cleared 2 stored budgets: the settings' apply again"
    status = json.loads(invoke([*base, "status", "--json"], env=env).output)["spend"]
    assert (status["daily_budget_usd"], status["daily_budget_from"]) == (2.5, f"config file {conf}")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--daily", "-1"], "the daily budget must be between 0 (no limit) and 1,000,000,000 US dollars, not -1"),
    (["--monthly", "nan"], "the monthly budget is a number of US dollars, not nan"),
    (["--daily", "inf"], "the daily budget must be between 0"),
    (["--daily", "five"], "bad value for --daily: expected a number of US dollars, got 'five'"),
    (["--daily", "1", "--clear"], "give --clear alone, or --daily and/or --monthly"),
])
def test_a_bad_budget_is_one_line_and_stores_nothing(tmp_path: Path, args: list[str], fragment: str) -> None:
    db = tmp_path / "inbox.db"
    assert invoke(["--db", str(db), "budget", "--daily", "3"]).exit_code == 0
    result = invoke(["--db", str(db), "budget", *args])
    assert_user_error(result.exit_code, result.stdout, result.stderr, fragment)
    with Store.open(db) as store:
        budgets = store.budgets(BudgetDefaults())
        assert (budgets["daily"].usd, budgets["monthly"].source) == (3.0, "default")


def test_a_bad_budget_or_price_in_the_config_is_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "inbox.db")
    bad = config(tmp_path, "daily_budget_usd = -2\n")
    result = invoke(["--db", db, "--config", str(bad), "status"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "bad value for daily_budget_usd",
                      "must be between 0")
    bad = config(tmp_path, '[prices."claude-x"]\ninput = 1\n')
    result = invoke(["--db", db, "--config", str(bad), "status"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "bad value for prices",
                      "[prices.'claude-x'] needs output")
    result = invoke(["--db", db, "status"], env={"AGENT_CONSOLE_CLAUDE_PROMPT_CACHE": "maybe"})
    assert_user_error(result.exit_code, result.stdout, result.stderr, "claude_prompt_cache", "expected true or false")


def test_usage_adds_up_days_sources_and_events_in_the_owners_time_zone(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    zone = ZoneInfo("Asia/Tokyo")
    now = int(datetime.now(zone).replace(hour=12, minute=0, second=0, microsecond=0).timestamp())
    with Store.open(db) as store:
        store.ingest("chat", "m1", {}, now=now - 86_400)
        store.ingest("github", "d1", {}, now=now - 86_400)
    spend(db, 1, now - 86_400, 2 * CENT)
    spend(db, 2, now - 60, 5 * CENT)
    spend(db, 2, now - 30, None, model="claude-nonesuch-9")
    env = {"AGENT_CONSOLE_TIMEZONE": "Asia/Tokyo"}
    result = invoke(["--db", str(db), "usage", "--days", "3", "--json"], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [(day["calls"], day["cost_usd"]) for day in report["days"]] == [(0, 0.0), (1, 0.02), (2, None)]
    assert report["total"]["unpriced_calls"] == 1 and report["total"]["cache_read_tokens"] == 12_000
    assert [(event["event_id"], event["source"]) for event in report["top_events"]] == [(1, "chat"), (2, "github")]
    text = invoke(["--db", str(db), "usage", "--days", "3"], env=env).output
    assert "(Asia/Tokyo)" in text.splitlines()[0]
    assert "total             3      3,600            0      12,000       900  unknown (1 without a price)" in text
    assert "#1                1      1,200            0       4,000       300  $0.02  chat/m1" in text

    shown = invoke(["--db", str(db), "show", "2"], env=env).output
    runs = shown[shown.index("model calls:"):].splitlines()[1:]
    assert [run.split("  ", 3)[-1] for run in runs] == [
        "1 call · 1,200 in · 4,000 cache read · 300 out · $0.05",
        "1 call · 1,200 in · 4,000 cache read · 300 out · cost unknown (no price for claude-nonesuch-9)"]
    calls = json.loads(invoke(["--db", str(db), "show", "2", "--json"], env=env).output)["model_calls"]
    assert [call["cost_usd"] for call in calls] == [0.05, None]


def test_usage_reads_without_writing(tmp_path: Path) -> None:
    result = invoke(["--db", str(tmp_path / "missing.db"), "usage"])
    assert_user_error(result.exit_code, result.stdout, result.stderr, "no inbox at")
