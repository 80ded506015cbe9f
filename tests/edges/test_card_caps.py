"""Every card counts (issue 31 item 6): the question and approval cards of runs that read untrusted content count
toward max_messages_per_hour and, past it, are held like any other message: the requests wait in the console and
`status`, answerable there, and the owner is told once. A real engine on a real inbox file, the obedient
stand-in agent going through the real gateway, and the ntfy stand-in counting what reaches the phone."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.agents.base import RunContext
from console.agents.gateway import ToolGateway
from console.agents.tools import ToolCall
from console.clock import ManualClock
from console.core import Store
from console.trust.policy import Policy
from console.trust.provenance import Provenance
from tests.edges.phone_harness import START, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInNtfy, is_card

CAP = 3
DELIVERIES = 8
NOTICE = "The agent reached its cap of 3 messages to you per hour"


class AskingAgent:
    """For each GitHub delivery does what its text asks (an obedient model): tells the owner about it and asks a
    question (ask_owner, which every run may use), announcing it as a card."""

    name = "asking"

    def __init__(self, source: str = "github") -> None:
        self.tools = ToolGateway(Policy())
        self.source = source

    def run(self, ctx: RunContext) -> None:
        for event in ctx.events:
            if event.source != self.source:
                continue
            provenance, sources = Provenance.of_events([event]), ctx.sources([event])
            self.tools.call(ctx, ToolCall(f"m-{event.id}", "send_message", {"text": f"Issue {event.source_id} opened"}),
                            event=event, sources=sources, provenance=provenance)
            outcome = self.tools.call(ctx, ToolCall(f"q-{event.id}", "ask_owner",
                                                    {"question": f"Close issue {event.source_id}?"}),
                                      event=event, sources=sources, provenance=provenance)
            assert outcome.outcome == "deferred"
            ctx.announce(next(a for a in ctx.approvals if a.request_id == outcome.request_id))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


async def test_eight_untrusted_runs_with_a_cap_of_three_send_three_messages_and_one_notice(
        tmp_path: Path, clock: ManualClock) -> None:
    ntfy = StandInNtfy(clock.now, token="tk", protected=("agent",))
    await ntfy.start()
    try:
        table = {"type": "ntfy", "server": ntfy.url, "topic": "agent", "token_env": "NTFY_TEST_TOKEN"}
        settings = phone_settings(tmp_path, table, max_messages_per_hour=CAP, outbox_gap=0)
        async with running(settings, clock, {"NTFY_TEST_TOKEN": "tk"}, agent=AskingAgent()) as engine:
            for number in range(DELIVERIES):
                await engine.ingest("github", f"issue-{number}", {"body": "ask the owner about this issue"})
            await stored(engine, lambda s: s.counts()["done"] == DELIVERIES, "every delivery's run")
            await stored(engine, lambda s: s.outbox_counts()["queued"] == 0, "the outbox sent")
            await until(lambda: any(m["message"].startswith(NOTICE) for m in ntfy.messages), "the notice")
            sent = [m["message"] for m in ntfy.messages if m["topic"] == "agent"]
            notices = [text for text in sent if text.startswith(NOTICE)]
            cards = [text for text in sent if is_card(text)]
            assert len(notices) == 1 and len(sent) - len(notices) <= CAP, sent
            assert 0 < len(cards) <= CAP
            # Every request waits, listed where the owner looks, and each is answerable there.
            status = await engine.read(lambda s: s.status(now=clock.now()))
            pending = [a["request_id"] for a in status["approvals_pending"]]
            assert len(pending) == DELIVERIES
            held = await engine.read(lambda s: s.held_messages())
            held_cards = [m.approval_id for m in held if m.approval_id is not None]
            assert len(held_cards) == DELIVERIES - len(cards) and set(held_cards) <= set(pending)
            with Store.open(settings.db) as cli:
                assert cli.answer_approval(held_cards[0], "no", now=clock.now(), via="cli") == "no"
                # Released later, a held card still carries its request: a phone sends it with buttons (or, answered
                # meanwhile, as settled).
                cli.release_held(now=clock.now())
                linked = [m.approval_id for m in cli.outbox_messages() if m.approval_id is not None]
            assert set(held_cards) <= set(linked)
    finally:
        await ntfy.stop()


async def test_a_trusted_runs_card_is_counted_but_never_held(tmp_path: Path, clock: ManualClock) -> None:
    ntfy = StandInNtfy(clock.now, token="tk", protected=("agent",))
    await ntfy.start()
    try:
        table = {"type": "ntfy", "server": ntfy.url, "topic": "agent", "token_env": "NTFY_TEST_TOKEN"}
        settings = phone_settings(tmp_path, table, max_messages_per_hour=1, outbox_gap=0)
        async with running(settings, clock, {"NTFY_TEST_TOKEN": "tk"}, agent=AskingAgent("chat")) as engine:
            for number in range(3):
                await engine.ingest("chat", f"c{number}", {"text": "ask me"})
            await stored(engine, lambda s: s.counts()["done"] == 3 and s.outbox_counts()["queued"] == 0, "the runs")
            await until(lambda: len(ntfy.cards("agent")) == 3, "the owner's own three cards")
            held = await engine.read(lambda s: s.held_messages())
            assert len(held) == 2 and all(m.approval_id is None for m in held)  # the messages, not the cards
    finally:
        await ntfy.stop()
