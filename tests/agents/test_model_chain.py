"""A chain of models (issue 34): a primary on the Messages API and a fallback on Chat Completions, each a stand-in on
127.0.0.1 (tests/agents/stand_in.py, tests/agents/openai_stand_in.py) that refuses with a 400 whatever its API would
refuse. The engine runs on a ManualClock: a cooldown ends when the test moves the clock, never by waiting."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from console import telemetry
from console.agents.anthropic_model import AnthropicModel
from console.agents.claude import ClaudeAgent
from console.agents.openai_model import OpenAIModel
from console.agents.spending import SpendGuard
from console.clock import ManualClock
from console.config import ConfigError, load_settings
from console.core import Store
from console.modelspec import model_rows, parse_models
from console.runtime.engine import Engine
from console.tui.detail import read_detail
from tests.agents.openai_stand_in import FakeOpenAI, call, serve_openai
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY, NOW, Shop, run, shop_tools
from tests.agents.test_claude_provider import running_engine
from tests.support import read_until

FALLBACK_PRICE = {"input": 0.5, "output": 1.5}  # USD per million tokens: the fallback's own


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    with serve_openai() as fake:
        yield fake


def chain(claude: FakeClaude, local: FakeOpenAI) -> list[dict[str, Any]]:
    return [
        {"name": "primary", "protocol": "anthropic", "base_url": claude.url, "model": "claude-sonnet-5-5",
         "api_key_env": "ANTHROPIC_API_KEY"},
        {"name": "local", "protocol": "openai", "base_url": local.url, "model": "qwen3", "prices": FALLBACK_PRICE},
    ]


def chained_engine(tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch,
                   **settings: Any) -> AbstractAsyncContextManager[Engine]:
    return running_engine(tmp_path, claude.url, monkeypatch, models=chain(claude, local), **settings)


def turns(store: Store, event_id: int) -> list[tuple[str, Any]]:
    """Each committed model turn of an event's conversation, and the model of the chain that answered it."""
    return [(step.idem_key, step.result.get("via")) for step in store.journal_steps(event_id)
            if step.state == "committed" and step.idem_key.split(":")[-2] == "turn"]


def rate_limited(claude: FakeClaude, times: int, retry_after: int = 30) -> None:
    for _ in range(times):
        claude.fail(429, "rate_limit_error", "Number of requests has exceeded your rate limit",
                    headers={"retry-after": str(retry_after)})


async def test_a_rate_limited_primary_gives_the_next_turn_to_the_fallback_and_gets_it_back_when_it_recovers(
    tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.reply(tool("t1", "send_message", text="On it."))
    rate_limited(claude, 20)  # the primary answers 429, retry-after 30, to everything for ten minutes
    local.reply("Done.")
    arrivals: list[tuple[str, float]] = []  # which stand-in was asked, and when
    claude.on_request = lambda _request: arrivals.append(("primary", time.monotonic()))
    local.on_request = lambda _request: arrivals.append(("local", time.monotonic()))
    async with chained_engine(tmp_path, claude, local, monkeypatch) as engine:
        await engine.ingest("chat", "m1", {"text": "say hi"})
        (event,) = await read_until(engine, lambda s: [e for e in s.events() if e.status == "done"])
        (_, refused), (_, fallback) = arrivals[1:3]
        assert [who for who, _ in arrivals] == ["primary", "primary", "local"]
        assert fallback - refused < 5  # no wait for the primary's retry-after: the fallback took turn 2 at once
        assert event.attempts == 1  # the failover spent no attempt
        assert await engine.read(lambda s: turns(s, event.id)) == [
            (f"claude:{event.id}:turn:1", "primary"), (f"claude:{event.id}:turn:2", "local")]
        messages = await engine.read(lambda s: s.outbox_messages())
        assert [m.body for m in messages if m.body == "On it."] == ["On it."]  # the tool call was not repeated
        # The fallback read turn 1 in its own protocol: the call and its result as tool_calls and a tool message.
        (asked,) = local.requests
        assert [m["role"] for m in asked["messages"]] == ["system", "user", "assistant", "tool"]
        assert asked["messages"][2]["tool_calls"][0]["id"] == "t1" and asked["messages"][3]["tool_call_id"] == "t1"
        assert claude.refused == [] and local.refused == []
        assert isinstance(engine.clock, ManualClock)
        specs = parse_models(chain(claude, local))
        rows = await engine.read(lambda s: model_rows(specs, s.model_health(), now=NOW))
        assert [(r["name"], r["state"], r["until"], r["in_use"]) for r in rows] == [
            ("primary", "cooling", NOW + 30, False), ("local", "ready", None, True)]
        state = await engine.read(lambda s: s.agent_state())
        assert state.state == "ready"

        # Ten minutes of 429s: each new run asks the primary first once its cooldown has ended, and moves on.
        for minute in range(1, 11):
            engine.clock.set(NOW + 60 * minute)
            local.reply(f"Handled {minute}.")
            await engine.ingest("chat", f"m{minute + 1}", {"text": f"minute {minute}"})
            await read_until(engine, lambda s, n=minute: s.counts()["done"] == n + 1)
        assert len(local.requests) == 11 and all(e.attempts == 1 for e in await engine.read(lambda s: s.events()))
        # announce_fallback (on by default): the owner heard once, in the hour, that the fallback answers.
        said = [m.body for m in await engine.read(lambda s: s.outbox_messages())]
        [announced] = [body for body in said if body.startswith("Fallback model local")]
        assert "primary" in announced and "at most once an hour" in announced

        # The primary recovers: once its cooldown has ended the next run is back on it.
        claude.script.clear()
        claude.reply(text("Back."))
        engine.clock.set(NOW + 60 * 11)
        await engine.ingest("chat", "m-back", {"text": "still there?"})
        await read_until(engine, lambda s: s.counts()["done"] == 12)
        back = (await engine.read(lambda s: s.events()))[0]
        assert await engine.read(lambda s: turns(s, back.id)) == [(f"claude:{back.id}:turn:1", "primary")]
        assert len(local.requests) == 11
        rows = await engine.read(lambda s: model_rows(specs, s.model_health(), now=engine.clock.now()))
        assert [(r["name"], r["state"], r["in_use"]) for r in rows] == [("primary", "ready", True),
                                                                         ("local", "ready", False)]


async def test_a_refused_key_on_the_primary_tells_the_owner_once_and_the_fallback_answers(
    tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.fail(401, "authentication_error", "invalid x-api-key")
    local.reply(None, call("call_1", "send_message", text="Hello from the fallback."))
    local.reply("Done.")
    local.reply("Done again.")
    async with chained_engine(tmp_path, claude, local, monkeypatch) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        await read_until(engine, lambda s: s.counts()["done"] == 1)
        await engine.ingest("chat", "m2", {"text": "again"})
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        assert len(claude.requests) == 1  # paused: not asked again by this engine
        assert (await engine.read(lambda s: s.agent_state())).state == "ready"
        messages = await engine.read(lambda s: s.outbox_messages())
        notices = [m for m in messages if m.body.startswith("Model primary cannot answer")]
        assert len(notices) == 1 and notices[0].urgent
        assert "refused the key (401: invalid x-api-key); check ANTHROPIC_API_KEY" in notices[0].body
        assert any(m.body == "Hello from the fallback." for m in messages)
        assert all(e.attempts == 1 for e in await engine.read(lambda s: s.events()))
        status = await engine.read(lambda s: s.model_health())
        assert [(r["name"], r["state"]) for r in status] == [("local", "ready"), ("primary", "paused")]


async def test_a_conversation_crosses_protocols_both_ways_without_a_refused_request(
    tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    rate_limited(claude, 1)
    # The fallback answers turn 1 with a call, one with an id the Messages API would refuse; while it answers,
    # the primary's cooldown ends, so turn 2 is the primary's again, reading the fallback's calls.
    local.reply(None, call("call_a", "send_message", text="one"), call("call:b", "remember", key="k", value="v"))
    claude.reply(tool("t2", "send_message", text="two"))
    claude.reply(text("Done."))

    def cooled(_request: dict[str, Any]) -> None:
        engine.clock.advance(31)

    local.on_request = cooled
    async with chained_engine(tmp_path, claude, local, monkeypatch) as engine:
        assert isinstance(engine.clock, ManualClock)
        await engine.ingest("chat", "m1", {"text": "two things"})
        (event,) = await read_until(engine, lambda s: [e for e in s.events() if e.status == "done"])
        assert await engine.read(lambda s: turns(s, event.id)) == [
            (f"claude:{event.id}:turn:1", "local"), (f"claude:{event.id}:turn:2", "primary"),
            (f"claude:{event.id}:turn:3", "primary")]
        assert claude.refused == [] and local.refused == []
        ids = [block["id"] for block in claude.requests[1]["messages"][1]["content"]]
        assert ids[0] == "call_a" and ids[1].startswith("call_") and ":" not in ids[1]
        bodies = [m.body for m in await engine.read(lambda s: s.outbox_messages())]
        assert bodies.count("one") == 1 and bodies.count("two") == 1


async def test_every_model_cooling_keeps_the_events_pending_with_no_attempt_spent(
    tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    rate_limited(claude, 1, retry_after=100)
    local.fail(429, "Rate limit reached for requests", kind="requests", code="rate_limit_exceeded",
               headers={"retry-after": "60"})
    async with chained_engine(tmp_path, claude, local, monkeypatch) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        state = await read_until(engine, lambda s: s.agent_state().state == "waiting" and s.agent_state())
        assert state.until == NOW + 60  # the earliest cooldown's end
        await engine.ingest("chat", "m2", {"text": "anyone?"})
        start = engine.worker.holds
        await read_until(engine, lambda s: engine.worker.holds >= start + 3)
        events = await engine.read(lambda s: s.events())
        assert [(e.status, e.attempts) for e in events] == [("pending", 0), ("pending", 0)]
        assert (len(claude.requests), len(local.requests)) == (1, 1)
        # The fallback's cooldown ends first: it takes the events, the primary still cooling.
        local.reply("Done.")
        assert isinstance(engine.clock, ManualClock)
        engine.clock.set(NOW + 60)
        engine.wake()
        await read_until(engine, lambda s: s.counts()["done"] == 2)
        assert (len(claude.requests), len(local.requests)) == (1, 2)


async def test_a_fallback_run_is_priced_at_its_own_model(
    tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude.fail(529, "overloaded_error", "Overloaded")
    local.reply("Done.")
    async with chained_engine(tmp_path, claude, local, monkeypatch, daily_budget_usd=5.0) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        [event] = await read_until(engine, lambda s: [e for e in s.events() if e.status == "done"])
        rows = [row for row, *_ in await engine.read(lambda s: s.spend_rows(since=0))]
        history = await engine.read(lambda s: s.history(event.id))
        transcript = await engine.read(read_detail(event.id, now=NOW, holder="w", mode="run"))
    # Never silent: the switch is a line in the run's history and in its transcript, before the turn it names.
    [switch] = [a.detail for a in history if a.kind == "model"]
    assert switch.startswith(f"claude:{event.id} turn 1: model local (qwen3, openai) instead of primary: ")
    assert "529" in switch or "overloaded" in switch.lower()
    lines = [line.text for line in transcript.transcript.lines]
    assert lines[:2] == [f"⇄ {switch}", f"claude:{event.id} · turn 1"]
    # The trace names who answered: the primary's refused call and the fallback's, each in its own protocol.
    spans = [telemetry.attributes_of(span) for span in telemetry.read_spans(tmp_path, "inbox.db.telemetry.jsonl")
             if span["name"].startswith("chat ")]
    [refused, answered] = spans
    assert (refused["gen_ai.provider.name"], refused["gen_ai.request.model"]) == ("anthropic", "claude-sonnet-5-5")
    assert "gen_ai.response.model" not in refused
    assert (answered["gen_ai.provider.name"], answered["gen_ai.request.model"], answered["gen_ai.response.model"],
            answered["gen_ai.response.finish_reasons"]) == ("openai", "qwen3", "qwen3", ["stop"])
    (priced,) = [row for row in rows if row.state == "settled"]
    assert priced.model == "qwen3"
    expected = round((priced.input_tokens * FALLBACK_PRICE["input"] + priced.output_tokens * FALLBACK_PRICE["output"])
                     * 1000)
    assert priced.cost_nanos == expected and expected > 0
    assert [row.model for row in rows if row.state != "settled"] == []  # the primary's refused call cost nothing
    assert (answered["gen_ai.usage.input_tokens"], answered["gen_ai.usage.output_tokens"]) == (
        priced.input_tokens, priced.output_tokens) and answered["gen_ai.response.id"].startswith("chatcmpl-")


async def test_an_unpriced_fallback_follows_the_unknown_spend_rule(
    tmp_path: Path, claude: FakeClaude, local: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fallback with no price, while a budget is in force: its call is not made (its cost could not be counted
    against the budget), the agent pauses saying so, and the event waits with no attempt spent."""
    claude.fail(529, "overloaded_error", "Overloaded")
    local.reply("Done.")
    unpriced = [{**row, "prices": None} if row["name"] == "local" else row for row in chain(claude, local)]
    unpriced = [{k: v for k, v in row.items() if v is not None} for row in unpriced]
    async with running_engine(tmp_path, claude.url, monkeypatch, models=unpriced, daily_budget_usd=5.0) as engine:
        await engine.ingest("chat", "m1", {"text": "hi"})
        state = await read_until(engine, lambda s: s.agent_state().state != "ready" and s.agent_state())
        [event] = await engine.read(lambda s: s.events())
    assert local.requests == [] and len(claude.requests) == 1
    assert "qwen3" in (state.reason or "") and "price" in (state.reason or "")
    assert (event.status, event.attempts) == ("pending", 0)


def test_a_bad_models_table_is_one_clear_line(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[[models]]\nname = "x"\nprotocol = "grpc"\nmodel = "m"\n')
    with pytest.raises(ConfigError, match=r"bad value for models in config file .*: \[\[models\]\] 'x': protocol "
                                          r"must be \"anthropic\" or \"openai\", got 'grpc'"):
        load_settings(config, env={})



@pytest.mark.parametrize("ask_all", [True, False])
def test_a_model_marked_ask_all_asks_for_every_world_changing_call_while_it_drives(
    claude: FakeClaude, local: FakeOpenAI, store: Store, ask_all: bool
) -> None:
    shop, spend = Shop(), SpendGuard()
    primary, fallback = parse_models(chain(claude, local))
    agent = ClaudeAgent(max_tokens=256, tools=shop_tools(shop), spend=spend, models=[
        AnthropicModel(primary, FAKE_KEY, spend=spend, timeout=30),
        OpenAIModel(dataclasses.replace(fallback, ask_all=ask_all), None, spend=spend, timeout=30)])
    store.ingest("chat", "m1", {"text": "look up order 8"}, now=NOW)
    claude.fail(529, "overloaded_error", "Overloaded")
    local.reply(None, call("call_1", "lookup_order", order="8"))  # allowed by the policy
    local.reply("Done.")
    ctx = run(agent, store)
    (record,) = ctx.tool_log
    if ask_all:
        assert shop.calls == [] and [a.action for a in ctx.approvals] == ['lookup_order(order="8")']
        assert record.decision == "asked"
        assert record.rule == "allow: lookup_order, but model local (ask_all) asks for every world-changing call"
    else:
        assert shop.calls == [("lookup_order", "8")] and ctx.approvals == []
        assert (record.decision, record.rule) == ("allowed", "allow: lookup_order")
