"""The agent never spends more than its owner allows: every model call is reserved at its worst case before it
is made and settled with the stand-in's billed usage after; a budget that would be passed pauses the agent.

The engine runs the Claude agent against the stand-in Messages API on 127.0.0.1 (tests/agents/stand_in.py),
which bills each reply's usage as the Messages API documents it; the clock is a ManualClock, so a day or a
month rolls over when the test moves it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from console.agents.base import RunContext
from console.agents.claude import ClaudeAgent
from console.agents.errors import AgentPaused, BudgetReached, ProviderBusy
from console.agents.spending import SpendGuard
from console.clock import ManualClock
from console.core import Store, StoreUnavailable
from console.core.models import BudgetDefaults
from console.pricing import PriceTable, parse_prices
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY, NOW, ROOT, claim
from tests.agents.test_claude_provider import (
    closed_port,
    read,
    running_engine,
    status_of,
    wait_in_process,
    worker_holds_off,
)
from tests.cli.helpers import isolated_env, run_process
from tests.support import read_until, until

# claude-sonnet-5-5's list prices, USD per million tokens, written out here rather than read from the table
# under test.
SONNET = {"input_tokens": 2.0, "output_tokens": 10.0, "cache_creation_input_tokens": 2.5,
          "cache_read_input_tokens": 0.2}
MAX_TOKENS = 2048  # each call's worst case: about $0.021 of output and $0.005 of prompt


def billed_usd(usage: dict[str, int], prices: dict[str, float] = SONNET) -> float:
    return sum(usage.get(name, 0) * price for name, price in prices.items()) / 1e6


def ledger(store: Store) -> list[tuple[str, int | None]]:
    return [(row.state, row.cost_nanos) for row, _, _ in store.spend_rows(since=0)]


async def test_a_budget_of_a_few_cents_stops_the_next_call_before_it_is_made_and_raising_it_resumes(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.reply(tool("t1", "send_message", text="Build 412 is green."), output_tokens=2000)  # about $0.022
    claude.reply(text("Done."))
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=0.03,
                              claude_max_tokens=MAX_TOKENS, timezone="Europe/Berlin") as engine:
        await engine.ingest("github", "d-1", {"build": 412, "state": "green"})
        state = await read_until(engine, lambda s: s.agent_state().state == "paused" and s.agent_state())
        # The first call fit (worst case about $0.026 of $0.03); it cost about $0.022, so the second call's
        # worst case would pass the budget: it was not made.
        assert len(claude.requests) == 1
        assert state.reason == "daily budget reached"
        midnight = int(datetime(2026, 9, 22, tzinfo=ZoneInfo("Europe/Berlin")).timestamp())
        assert NOW < state.until == midnight  # NOW is 2026-09-21 16:53 UTC
        (event,) = await engine.read(lambda s: s.events())
        assert (event.status, event.attempts) == ("pending", 0)
        (notice,) = await engine.read(lambda s: s.outbox_messages())
        assert notice.urgent and notice.body.startswith("The agent is paused: daily budget reached ($0.02")
        assert "of $0.03, and the next model call could cost up to $0.02" in notice.body
        assert "agent-console budget --daily AMOUNT" in notice.body
        first_cost = billed_usd(claude.usages[0])
        status = await engine.read(lambda s: s.status(now=NOW, budgets=engine.settings.budget_defaults()))
        assert status["agent"] == {"state": "paused", "reason": "daily budget reached", "until": midnight}
        assert status["spend"]["today_usd"] == pytest.approx(first_cost)
        assert (status["spend"]["daily_budget_usd"], status["spend"]["daily_budget_from"]) == (0.03, "settings")
        await worker_holds_off(engine)
        assert len(claude.requests) == 1
        await engine.write(lambda s: s.set_budget("daily", 1.0, now=NOW))
        await read_until(engine, lambda s: s.counts()["done"] == 1)
        # Turn 1 of the build's conversation came from the journal: asked once, paid once.
        assert len(claude.requests) == 2
        rows = await engine.read(ledger)
        assert [state for state, _ in rows] == ["settled"] * 2
        spent = sum(cost for _, cost in rows if cost is not None) / 1e9
        assert spent == pytest.approx(sum(billed_usd(usage) for usage in claude.usages))
        bodies = [m.body for m in await engine.read(lambda s: s.outbox_messages()) if not m.urgent]
        assert bodies == ["From a run that read untrusted content (github delivery d-1 (#1)); "
                          "not an approval request:\nBuild 412 is green."]
        assert (await engine.read(lambda s: s.agent_state())).state == "ready"


async def test_the_month_rolls_over_in_the_owners_time_zone(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    zone = ZoneInfo("America/New_York")
    before_midnight = int(datetime(2026, 1, 31, 23, 59, tzinfo=zone).timestamp())  # already February in UTC
    first_of_february = int(datetime(2026, 2, 1, tzinfo=zone).timestamp())
    claude.reply(tool("t1", "send_message", text="Invoice run done."), output_tokens=2000)
    claude.reply(text("Done."))
    async with running_engine(tmp_path, claude.url, monkeypatch, monthly_budget_usd=0.03,
                              claude_max_tokens=MAX_TOKENS, timezone="America/New_York") as engine:
        assert isinstance(engine.clock, ManualClock)
        engine.clock.set(before_midnight)
        await engine.ingest("cron", "invoices-1", {"task": "invoices"})
        state = await read_until(engine, lambda s: s.agent_state().state == "paused" and s.agent_state())
        assert (state.reason, state.until) == ("monthly budget reached", first_of_february)
        engine.clock.set(first_of_february - 1)
        await engine.ingest("chat", "m2", {"text": "still there?"})  # arrives while paused: not claimed
        await worker_holds_off(engine)
        assert len(claude.requests) == 1  # still January in New York
        assert await engine.read(lambda s: s.counts()["pending"]) == 2
        engine.clock.set(first_of_february)
        engine.wake()
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        assert len(claude.requests) == 2  # both events in one new conversation
        defaults = engine.settings.budget_defaults()
        spend = await engine.read(lambda s: s.spend_summary(defaults, now=first_of_february))
        assert spend["month_usd"] == pytest.approx(billed_usd(claude.usages[1]))  # February's only
        report = await engine.read(lambda s: s.usage_report(days=2, zone=defaults.zone, now=first_of_february))
        assert [(day["date"], day["calls"]) for day in report["days"]] == [("2026-01-31", 1), ("2026-02-01", 1)]
        status = await engine.read(lambda s: s.status(now=first_of_february, budgets=defaults))
        assert status["agent"]["state"] == "ready" and status["spend"]["monthly_budget_usd"] == 0.03


async def test_a_model_with_no_price_costs_unknown_and_cannot_be_held_to_a_budget(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.reply(text("Noted."))
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_model="claude-nonesuch-9") as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
        assert await engine.read(ledger) == [("settled", None)]
        spend = await engine.read(lambda s: s.spend_summary(engine.settings.budget_defaults(), now=NOW))
        assert spend["today_usd"] is None and spend["month_usd"] is None  # unknown, never 0
    reason = ("model 'claude-nonesuch-9' has no price, so the daily budget cannot be kept: add "
              '[prices."claude-nonesuch-9"] to the config')
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_model="claude-nonesuch-9",
                              daily_budget_usd=5.0) as engine:
        await engine.ingest("chat", "m2", {"text": "and now?"})
        state = await read_until(engine, lambda s: s.agent_state().state == "paused" and s.agent_state())
        assert state.reason == reason and state.until is None  # a configuration to fix: until a restart
        assert len(claude.requests) == 1
    claude.reply(text("Priced now."))
    prices = {"claude-nonesuch-9": {"input": 1.0, "output": 4.0}}
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_model="claude-nonesuch-9",
                              daily_budget_usd=5.0, prices=prices) as engine:
        # The price added re-prices today's earlier call from its stored tokens: the day's spend is known
        # again, so the budget can be kept and the waiting event runs.
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        nonesuch = {"input_tokens": 1.0, "output_tokens": 4.0, "cache_creation_input_tokens": 1.25,
                    "cache_read_input_tokens": 0.1}
        costs = [cost for _, cost in await engine.read(ledger)]
        assert len(costs) == 2 and all(cost is not None for cost in costs)
        assert [cost / 1e9 for cost in costs if cost is not None] == [
            pytest.approx(billed_usd(usage, nonesuch)) for usage in claude.usages]


def test_a_replayed_turn_is_neither_asked_nor_counted_again(claude: FakeClaude, store: Store) -> None:
    agent = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=claude.url)
    store.ingest("chat", "m1", {"text": "remind me about the dentist"}, now=NOW)
    claude.reply(tool("t1", "send_message", text="Noted: dentist."))
    claude.fail(500, "api_error", "Internal server error")
    gen, events, now = claim(store, "w1", NOW)
    ctx = RunContext(store, events, now, "w1", gen, approval_expiry=600)
    with pytest.raises(Exception, match="500"):
        agent.run(ctx)
    assert ctx.finish(error="failed")
    assert [state for state, _ in ledger(store)] == ["settled"]  # the refused call's reservation is gone

    claude.reply(text("Nothing more."))
    gen, events, now = claim(store, "w1", NOW + 1)
    ctx = RunContext(store, events, now, "w1", gen, approval_expiry=600)
    agent.run(ctx)
    assert ctx.finish()
    assert len(claude.requests) == 3  # turn 1 replayed from the journal
    rows = ledger(store)
    assert len(rows) == 2
    total = sum(cost for _, cost in rows if cost is not None) / 1e9
    assert total == pytest.approx(billed_usd(claude.usages[0]) + billed_usd(claude.usages[1]))
    (row_1, row_2) = store.event_spend(events[0].id)
    assert (row_1.step_key, row_2.step_key) == (f"claude:{events[0].id}:turn:1", f"claude:{events[0].id}:turn:2")
    assert (row_1.input_tokens + row_1.cache_write_tokens + row_1.cache_read_tokens, row_1.output_tokens) == (
        claude.usages[0]["input_tokens"] + claude.usages[0]["cache_creation_input_tokens"]
        + claude.usages[0]["cache_read_input_tokens"], claude.usages[0]["output_tokens"])


def test_two_concurrent_events_under_one_lease_never_pass_the_budget(claude: FakeClaude, store: Store) -> None:
    """Two runs under the same holder and generation call the model at once. The first request is held at the
    stand-in until the second run has been decided: its reservation sees the first call's worst case, still
    in flight, and refuses. Without the reservation both calls would be made."""
    guard = SpendGuard(PriceTable(), BudgetDefaults(daily_usd=0.04, zone="UTC"))
    agent = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=MAX_TOKENS, base_url=claude.url,
                        spend=guard)
    store.ingest("chat", "m1", {"text": "first"}, now=NOW)
    store.ingest("chat", "m2", {"text": "second"}, now=NOW)
    gen, events, now = claim(store, "w1", NOW)
    assert len(events) == 2
    claude.reply(text("One."))
    claude.reply(text("Two."))
    second_decided = threading.Event()
    claude.on_request = lambda request: second_decided.wait(30) if len(claude.requests) == 1 else None
    outcomes: dict[int, Any] = {}

    def run(event_index: int) -> None:
        with store.reopen() as own:  # one connection per thread, as the engine's runner has
            ctx = RunContext(own, [events[event_index]], now, "w1", gen, approval_expiry=600)
            try:
                agent.run(ctx)
                outcomes[event_index] = "ran"
            except AgentPaused as exc:
                outcomes[event_index] = exc
            finally:
                if event_index == 1:
                    second_decided.set()

    first = threading.Thread(target=run, args=(0,))
    first.start()
    wait_in_thread(lambda: len(claude.requests) == 1)
    second = threading.Thread(target=run, args=(1,))
    second.start()
    second.join(30)
    first.join(30)
    assert outcomes[0] == "ran" and isinstance(outcomes[1], BudgetReached)
    assert len(claude.requests) == 1
    spent = store.spent("daily", zone="UTC", now=NOW)
    assert spent is not None and spent <= 0.04 * 1e9


def wait_in_thread(condition: Any, limit: float = 30.0) -> None:
    done = threading.Event()
    deadline = threading.Timer(limit, done.set)
    deadline.start()
    try:
        while not condition():
            assert not done.is_set(), "timed out"
            done.wait(0.01)  # the polling interval of a condition check
    finally:
        deadline.cancel()


def test_a_call_that_never_left_or_was_refused_costs_nothing_and_a_timeout_keeps_its_worst_case(
    claude: FakeClaude, store: Store
) -> None:
    store.ingest("chat", "m1", {"text": "hi"}, now=NOW)
    refused = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=64, base_url=claude.url)
    claude.fail(429, "rate_limit_error", "slow down")
    gen, events, now = claim(store, "w1", NOW)
    with pytest.raises(ProviderBusy, match="rate limiting"):
        refused.run(RunContext(store, events, now, "w1", gen, approval_expiry=600))
    unreachable = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=64,
                              base_url=f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(ProviderBusy, match="could not reach"):
        unreachable.run(RunContext(store, events, now, "w1", gen, approval_expiry=600))
    assert ledger(store) == []  # neither was billed: no reservation is left
    timed_out = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=64, base_url=claude.url,
                            timeout=0.3)
    claude.stall()
    with pytest.raises(Exception, match="claude_timeout"):
        timed_out.run(RunContext(store, events, now, "w1", gen, approval_expiry=600))
    ((state, worst),) = ledger(store)
    assert state == "reserved" and worst is not None and worst > 64 * 10 * 1000  # at least the output's worst case


def test_prices_in_the_config_replace_the_shipped_ones() -> None:
    table = PriceTable(parse_prices({"claude-sonnet-5-5": {"input": 1, "output": 2, "cache_read": 0.05}}))
    price = table.price("claude-sonnet-5-5-20261001")  # a dated snapshot takes its model's price
    assert price is not None and (price.input, price.output, price.cache_write, price.cache_read) == (1, 2, 1.25, 0.05)
    assert table.price("claude-opus-5-5") is not None and table.price("gpt-9") is None
    with pytest.raises(ValueError, match="needs output"):
        parse_prices({"m": {"input": 1}})
    with pytest.raises(ValueError, match="unknown field 'cache_hit'"):
        parse_prices({"m": {"input": 1, "output": 1, "cache_hit": 1}})


async def test_caching_breakpoints_never_exceed_what_the_api_takes(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):
        claude.reply(text(f"thinking {n}"), tool(f"t{n}", "perform_action", action=f"step {n}"),
                     tool(f"u{n}", "perform_action", action=f"again {n}"))
    claude.reply(text("Done."))
    async with running_engine(tmp_path, claude.url, monkeypatch) as engine:
        await engine.ingest("github", "push-1", {"commits": [f"commit {n}: " + "x" * 60 for n in range(50)]})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
    assert [sum(isinstance(part, dict) and "cache_control" in part for part in _blocks(sent))
            for sent in claude.sent] == [3] + [4] * 5  # the API refuses more than four (the stand-in too)
    writes = [usage["cache_creation_input_tokens"] for usage in claude.usages]
    reads = [usage["cache_read_input_tokens"] for usage in claude.usages]
    assert reads[0] == 0 and writes[0] > 0
    assert reads[1:] == [read + write for read, write in zip(reads, writes, strict=False)][:-1]  # all the last wrote


def _blocks(request: dict[str, Any]) -> list[Any]:
    parts: list[Any] = [*request["tools"], *request["system"]]
    for message in request["messages"]:
        parts += [message["content"]] if isinstance(message["content"], str) else message["content"]
    return parts


async def test_the_wait_for_a_raised_budget_is_not_a_sleep(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker is woken by the write that raises the budget, not by its idle timer (idle_cap here is long)."""
    claude.reply(tool("t1", "send_message", text="x"), output_tokens=2000)
    claude.reply(text("Done."))
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=0.03,
                              claude_max_tokens=MAX_TOKENS) as engine:
        engine.idle_cap = 30.0
        await engine.ingest("chat", "m1", {"text": "go"})
        await read_until(engine, lambda s: s.agent_state().state == "paused")
        await engine.write(lambda s: s.set_budget("daily", 1.0, now=NOW))
        started = asyncio.get_running_loop().time()
        await until(lambda: len(claude.requests) == 2, "the second call after the budget was raised")
        assert asyncio.get_running_loop().time() - started < engine.idle_cap / 2
        engine.idle_cap = 0.05  # so that stopping does not wait out a long idle period


def test_a_real_engine_pauses_at_its_budget_and_a_budget_raised_from_another_process_resumes_it(
    tmp_path: Path, claude: FakeClaude
) -> None:
    """`agent-console run` in its own process; `status --json` and `budget` from others, as the owner runs them."""
    claude.reply(tool("t1", "send_message", text="Deploy finished."), output_tokens=2000)
    claude.reply(text("Done."))
    db = tmp_path / "inbox.db"
    env = isolated_env(tmp_path / "home", AGENT_CONSOLE_AGENT="claude", AGENT_CONSOLE_CLAUDE_BASE_URL=claude.url,
                       AGENT_CONSOLE_DAILY_BUDGET_USD="0.03", AGENT_CONSOLE_CLAUDE_MAX_TOKENS=str(MAX_TOKENS),
                       AGENT_CONSOLE_TIMEZONE="Europe/Berlin", ANTHROPIC_API_KEY=FAKE_KEY)
    log = tmp_path / "run.log"
    with log.open("w") as stderr:
        engine = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "run"],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        assert run_process(["--db", str(db), "ingest", "ci", "deploy-7", '{"state": "finished"}'], env).returncode == 0
        wait_in_process(lambda: read(db, lambda s: s.agent_state().state == "paused"), "the budget pause")
        status = status_of(db, env)
        assert status["agent"]["state"] == "paused" and status["agent"]["reason"] == "daily budget reached"
        assert status["spend"]["today_usd"] == pytest.approx(billed_usd(claude.usages[0]))
        assert (status["spend"]["daily_budget_usd"], status["spend"]["daily_budget_from"]) == (
            0.03, "environment variable AGENT_CONSOLE_DAILY_BUDGET_USD")
        words = run_process(["--db", str(db), "status"], env).stdout
        assert "agent      paused (" in words and "or until the budget is raised): daily budget reached" in words
        assert len(claude.requests) == 1

        raised = run_process(["--db", str(db), "budget", "--daily", "1"], env)
        assert raised.returncode == 0, raised.stderr
        wait_in_process(lambda: read(db, lambda s: s.counts()["done"] == 1), "the event done after the raise")
        assert len(claude.requests) == 2  # the first turn came from the journal
        status = status_of(db, env)
        assert status["agent"]["state"] == "ready"
        assert (status["spend"]["daily_budget_usd"], status["spend"]["daily_budget_from"]) == (1.0, "inbox")
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=30) == 0
        assert "daily budget reached; 1 event(s) back to pending unrun" in log.read_text()
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=30)


async def test_the_worst_case_covers_what_a_call_cost_and_stays_within_the_batch_token_budget(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reservation bounds a call's prompt at a token a byte (the batch budget measures its events at 3 bytes
    a token, the stand-in bills at 4), so a batch cut to claude_batch_tokens has a bounded worst case, and the
    worst case is never less than what the call was billed."""
    for _ in range(3):
        claude.reply(text("Noted."))
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_batch_tokens=20_000) as engine:
        await engine.write(lambda s: s.ingest_many(
            [("github", f"d-{n}", {"log": f"{n}" * 30_000}) for n in range(5)], now=NOW))
        await read_until(engine, lambda s: s.counts()["done"] == 5)
        rows = await engine.read(lambda s: s.connection.execute(
            "SELECT reserved_nanos, cost_nanos FROM spend ORDER BY id").fetchall())
    assert len(rows) == 3
    # 20,000 estimated tokens of events (60,000 bytes), under 12,000 bytes of system prompt and tools and the
    # API's tool prompt, a token a byte, all at the cache-write price, plus 1,024 tokens of output.
    bound = round(((60_000 + 12_000) * 2.5 + 1024 * 10.0) * 1000)
    for reserved, cost in rows:
        assert cost <= reserved <= bound


def test_a_reply_that_cannot_be_settled_is_still_used_and_stays_counted_at_its_worst_case(
    claude: FakeClaude, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=64, base_url=claude.url)
    store.ingest("chat", "m1", {"text": "hi"}, now=NOW)
    claude.reply(text("Hello."))

    def busy(*args: Any, **kwargs: Any) -> bool:
        raise StoreUnavailable("the inbox is busy")

    monkeypatch.setattr(Store, "settle_spend", busy)
    gen, events, now = claim(store, "w1", NOW)
    ctx = RunContext(store, events, now, "w1", gen, approval_expiry=600)
    agent.run(ctx)  # the reply is paid for: the run goes on with it rather than paying for it again
    assert ctx.finish() and len(claude.requests) == 1
    ((state, worst),) = ledger(store)
    assert state == "reserved" and worst is not None and worst >= billed_usd(claude.usages[0]) * 1e9
