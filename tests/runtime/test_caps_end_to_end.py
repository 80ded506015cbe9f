"""Caps end to end (issue 18.7): one model reply with 50 allowed world-changing calls and 50 urgent send_message,
against the stand-in Messages API, a recording MCP server that counts the calls reaching it, and the ntfy
stand-in that counts the notifications reaching the owner's phone. Before the caps: 50 real effects and 51
phone notifications in a few seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.clock import ManualClock
from console.core import Store
from tests.agents.mcp_servers import serve_http
from tests.agents.stand_in import FakeClaude, text, tool
from tests.agents.test_claude_agent import FAKE_KEY
from tests.agents.test_claude_provider import running_engine
from tests.edges.phone_harness import START, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInNtfy
from tests.support import read_until

TOKEN = "tk_stand_in_token_0123456789"
ENV = {"NTFY_TEST_TOKEN": TOKEN}


@pytest.fixture
async def ntfy() -> Any:
    server = StandInNtfy(lambda: START, token=TOKEN, protected=("agent",))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def settled(store: Store) -> bool:
    """Nothing left to send: every queued message reached the channel."""
    counts = store.outbox_counts()
    return store.counts()["done"] >= 1 and counts["queued"] == 0 and counts["sending"] == 0


async def test_fifty_calls_and_fifty_messages_in_one_reply_make_twenty_of_each(
    tmp_path: Path, claude: FakeClaude, ntfy: StandInNtfy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    clock = ManualClock(START)
    with serve_http("rec") as server:
        channel = {"type": "ntfy", "server": ntfy.url, "topic": "agent", "token_env": "NTFY_TEST_TOKEN"}
        settings = phone_settings(
            tmp_path, channel, agent="claude", claude_base_url=claude.url, instructions=tmp_path / "none.md",
            mcp_servers={"rec": {"url": server.url, "trusted": True}},  # its results do not taint the run
            permissions={"allow": ["send_message", "mcp__rec__echo"]})  # the default caps: 20, 60, 20
        claude.reply(*[tool(f"c{n}", "mcp__rec__echo", text=f"refund {n}") for n in range(50)],
                     *[tool(f"m{n}", "send_message", text=f"message {n}", urgent=True) for n in range(50)])
        async with running(settings, clock, ENV) as engine:
            await engine.ingest("chat", "m1", {"text": "do it all"})
            (approval,) = await stored(engine, lambda s: s.pending_approvals(), "the call past the cap asks")
            await stored(engine, settled, "every queued message sent")
            effects = server.recorded()
            phone = [m["message"] for m in ntfy.messages if m["topic"] == "agent"]
            held = await engine.read(lambda s: s.held_messages())

            # The first 20 calls ran, the 21st asks, bound to exactly that call, saying why.
            assert [call["text"] for call in effects] == [f"refund {n}" for n in range(20)]
            assert (approval.tool, approval.arguments) == ("mcp__rec__echo", {"text": "refund 20"})
            assert "max_tool_calls_per_run" in approval.details["capped"]
            # 20 messages, the approval's card and one notice per cap reached; 30 messages held, none dropped.
            assert len(phone) == 20 + 1 + 2, phone
            assert [body for body in phone if body.startswith("message ")] == [f"message {n}" for n in range(20)]
            assert sum("max_tool_calls_per_run" in body for body in phone) == 1
            assert sum("max_messages_per_hour" in body for body in phone) == 1
            assert [m.body for m in held] == [f"message {n}" for n in range(20, 50)]

            # Yes runs the approved call (counted, never stopped by the cap), once.
            claude.reply(text("Done."))
            assert await engine.answer(approval.request_id, "yes") == "yes"
            await until(lambda: len(server.recorded()) == 21, "the approved call made")
            await stored(engine, lambda s: s.counts()["done"] == 2, "the resumed run done")
            assert await engine.read(lambda s: s.calls_in_last_hour(now=clock.now())) == 21

            # The owner releases what was held: it goes out, and no cap stops it.
            released = await engine.write(lambda s: s.release_held(now=clock.now()))
            assert len(released) == 30
            await until(lambda: sum(m["message"].startswith("message ") for m in ntfy.messages) == 50,
                        "the released messages sent")


async def test_the_hourly_cap_survives_a_restart_and_its_crossing_is_told_once(
    tmp_path: Path, claude: FakeClaude, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """25 calls an hour: a first engine makes 20 (its run's cap), a second engine on the same inbox 5 more, and
    from then on every call asks, in that run and the next; the owner hears of the hourly cap once."""
    with serve_http("rec") as server:
        settings: dict[str, Any] = dict(
            mcp_servers={"rec": {"url": server.url, "trusted": True}},
            permissions={"allow": ["send_message", "mcp__rec__echo"]}, max_tool_calls_per_hour=25)

        def reply(tag: str, count: int) -> None:
            claude.reply(*[tool(f"{tag}{n}", "mcp__rec__echo", text=f"{tag} {n}") for n in range(count)])

        reply("a", 30)
        async with running_engine(tmp_path, claude.url, monkeypatch, **settings) as engine:
            await engine.ingest("chat", "m1", {"text": "first"})
            await read_until(engine, lambda s: s.counts()["done"] == 1)
        assert len(server.recorded()) == 20
        reply("b", 10)
        reply("c", 10)
        async with running_engine(tmp_path, claude.url, monkeypatch, **settings) as engine:  # a restart
            await engine.ingest("chat", "m2", {"text": "second"})
            await read_until(engine, lambda s: s.counts()["done"] == 2)
            await engine.ingest("chat", "m3", {"text": "third"})
            await read_until(engine, lambda s: s.counts()["done"] == 3)
            approvals = await engine.read(lambda s: s.pending_approvals())
            notices = [m.body for m in await engine.read(lambda s: s.outbox_messages()) if "world-changing" in m.body]
    assert [call["text"] for call in server.recorded()] == [
        *(f"a {n}" for n in range(20)), *(f"b {n}" for n in range(5))]
    assert sorted(approval.arguments["text"] for approval in approvals) == ["a 20", "b 5", "c 0"]
    assert sum("max_tool_calls_per_run" in body for body in notices) == 1
    assert sum("max_tool_calls_per_hour" in body for body in notices) == 1
