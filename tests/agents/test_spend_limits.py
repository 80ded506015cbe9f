"""Spend (issue 18.9), against the stand-in Messages API: a call is priced at the dearer of the model asked for and
the one that answered; the worst-case reservation is truly worst-case (1 byte a token, and the API's
count_tokens near the limit); a call without a price no longer locks every model out for the day (a price
added later re-prices it, a raised budget lifts the pause)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core import Store
from tests.agents.stand_in import FakeClaude, text
from tests.agents.test_claude_agent import NOW
from tests.agents.test_claude_provider import running_engine, worker_holds_off
from tests.agents.test_spend import ledger
from tests.support import read_until

# USD per million tokens (input, output, cache write, cache read), written out rather than read from the table.
SONNET = {"input_tokens": 2.0, "output_tokens": 10.0, "cache_creation_input_tokens": 2.5,
          "cache_read_input_tokens": 0.2}
OPUS = {"input_tokens": 5.0, "output_tokens": 25.0, "cache_creation_input_tokens": 6.25,
        "cache_read_input_tokens": 0.5}


def billed_nanos(usage: dict[str, int], prices: dict[str, float]) -> int:
    return round(sum(usage.get(name, 0) * price for name, price in prices.items()) * 1000)


def spent_nanos(store: Store) -> int:
    return sum(cost for _, cost in ledger(store) if cost is not None)


async def test_a_call_is_priced_at_the_dearer_of_the_model_asked_for_and_the_one_that_answered(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A routing proxy answers as claude-haiku-5-5 (a twentieth of Sonnet's price): the call is still Sonnet's.
    One that answers as a dearer model is priced as that one."""
    claude.reply(text("Cheap, it says."), model="claude-haiku-5-5")
    claude.reply(text("Dear, it says."), model="claude-opus-5")
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_model="claude-sonnet-5-5") as engine:
        await engine.ingest("chat", "m1", {"text": "one"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
        await engine.ingest("chat", "m2", {"text": "two"})
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        rows = await engine.read(ledger)
    assert rows == [("settled", billed_nanos(claude.usages[0], SONNET)),
                    ("settled", billed_nanos(claude.usages[1], OPUS))]


async def test_the_reservation_is_a_true_worst_case_so_a_dense_prompt_never_passes_the_budget(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every byte of the prompt is a token (text that tokenizes densely: CJK, emoji, base64). Reserving at 3
    bytes a token let a run go a fifth over its budget; at 1 byte a token, with the API's own count near the
    limit, the calls stop before the budget is passed."""
    claude.cache.bytes_per_token = 1
    for _ in range(8):
        claude.reply(text("Noted."), output_tokens=10)
    budget = 0.055  # each call costs $0.0205; at 3 bytes a token a third was let through: $0.0616, 12 % over
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=budget, claude_max_tokens=64,
                              claude_prompt_cache=False) as engine:
        for n in range(8):
            await engine.ingest("chat", f"m{n}", {"text": "日本語の長い文章です。" * 200})
            await read_until(engine, lambda s, done=n + 1: s.counts()["done"] == done
                             or s.agent_state().state == "paused")
            if (await engine.read(lambda s: s.agent_state())).state == "paused":
                break
        state = await engine.read(lambda s: s.agent_state())
        spent = await engine.read(spent_nanos)
    assert state.state == "paused" and state.reason == "daily budget reached"
    assert spent == sum(billed_nanos(usage, SONNET) for usage in claude.usages)
    assert spent <= budget * 1e9, f"spent ${spent / 1e9:.4f} of a ${budget} budget"
    assert claude.counted, "near the limit the prompt is counted by the API"


async def test_near_the_limit_the_apis_count_lets_a_call_through_that_the_byte_bound_would_refuse(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the stand-in's usual 4 bytes a token, a byte-a-token bound is four times the real prompt: near the
    limit, the count endpoint's answer is reserved instead, and the call is made. Without the endpoint (a
    proxy answers 404) the bound stands and the agent pauses."""
    claude.reply(text("Noted."), output_tokens=10)
    payload = {"text": "x" * 20_000}  # about 20,000 tokens by the byte bound, 5,000 counted
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=0.03, claude_max_tokens=64,
                              claude_prompt_cache=False) as engine:
        await engine.ingest("chat", "m1", payload)
        await read_until(engine, lambda s: s.counts()["done"] == 1)
    assert len(claude.counted) == 1 and len(claude.requests) == 1
    claude.count_status = 404
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=0.03, claude_max_tokens=64,
                              claude_prompt_cache=False) as engine:
        await engine.ingest("chat", "m2", payload)
        state = await read_until(engine, lambda s: s.agent_state().state == "paused" and s.agent_state())
    assert state.reason == "daily budget reached" and len(claude.requests) == 1


async def unpriced_call_today(tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model with no price, used while no budget was in force: its call's cost is unknown."""
    claude.reply(text("Noted."))
    async with running_engine(tmp_path, claude.url, monkeypatch, claude_model="claude-nonesuch-9") as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
    with Store.open(tmp_path / "inbox.db") as store:
        assert ledger(store) == [("settled", None)]


async def test_raising_the_budget_lifts_the_pause_of_an_unknown_spend(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    await unpriced_call_today(tmp_path, claude, monkeypatch)
    claude.reply(text("Back."))
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=5.0) as engine:
        await engine.ingest("chat", "m2", {"text": "and now?"})  # a priced model, but today's spend is unknown
        state = await read_until(engine, lambda s: s.agent_state().budget and s.agent_state())
        assert "unknown" in (state.cause or {}).get("spent", "unknown") and len(claude.requests) == 1
        await worker_holds_off(engine)
        await engine.write(lambda s: s.set_budget("daily", 6.0, now=NOW))  # the owner raises it
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        assert (await engine.read(lambda s: s.agent_state())).state == "ready"
    assert len(claude.requests) == 2


async def test_a_price_added_later_reprices_the_stored_call_and_lifts_the_pause(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch
) -> None:
    await unpriced_call_today(tmp_path, claude, monkeypatch)
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=5.0) as engine:
        await engine.ingest("chat", "m2", {"text": "and now?"})
        await read_until(engine, lambda s: s.agent_state().budget and s.agent_state())
        assert len(claude.requests) == 1
    claude.reply(text("Priced now."))
    prices = {"claude-nonesuch-9": {"input": 1.0, "output": 4.0}}
    async with running_engine(tmp_path, claude.url, monkeypatch, daily_budget_usd=5.0, prices=prices) as engine:
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        rows = await engine.read(ledger)
    nonesuch = {"input_tokens": 1.0, "output_tokens": 4.0, "cache_creation_input_tokens": 1.25,
                "cache_read_input_tokens": 0.1}
    assert rows[0] == ("settled", billed_nanos(claude.usages[0], nonesuch))  # re-priced from its stored tokens
    assert rows[1] == ("settled", billed_nanos(claude.usages[1], SONNET))
