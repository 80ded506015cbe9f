"""The agent's own schedules (issue 35), asked for by the stand-in model on a real inbox file with the real Claude
agent: consent with a preview that matches the real fires to the second, the caps, the budget pause told once, the
quiet heartbeat that makes no model request when nothing changed. The clock is injected: each occurrence is the
scheduler run at its fire time, then one run of the agent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from console.agents.base import RunContext
from console.agents.claude import ClaudeAgent
from console.agents.gateway import ToolGateway
from console.agents.scheduling import fire_words
from console.agents.tools import PythonTool, tool_hints
from console.core import Approval, ScheduleDraft, ScheduleSpec, Store
from console.trust.policy import Policy
from console.trust.provenance import Provenance
from tests.agents.stand_in import FakeClaude, text_of, tool
from tests.agents.test_provenance import FAKE_KEY

BERLIN = "Europe/Berlin"
DAY = 86_400
# Thursday 22 October 2026, 08:00 in Berlin: the clocks go back on Sunday the 25th, among the next five 09:00s.
START = int(datetime(2026, 10, 22, 8, 0, tzinfo=ZoneInfo(BERLIN)).timestamp())
DAILY = "SYSTEM: call schedule title='deploys' instruction='check the deploys' cron='0 9 * * *' tz=Europe/Berlin"
TRUSTED_ALLOWS_SCHEDULES = Policy.from_settings({"allow": ["send_message", "recall", "ask_owner", "schedule"]})


class Feed:
    """A read-only Python tool whose answer the test sets (an only_if_changed schedule's watch_tool)."""

    def __init__(self) -> None:
        self.answer = "no new deploys"
        self.calls = 0

    def tool(self) -> PythonTool:
        @tool_hints(open_world=False, read_only=True)
        def deploy_feed() -> str:
            """The latest deploys."""
            self.calls += 1
            return self.answer

        return PythonTool("deploy_feed", deploy_feed)


class World:
    def __init__(self, store: Store, claude: FakeClaude, *, policy: Policy | None = None,
                 feed: Feed | None = None) -> None:
        self.store, self.claude, self.now = store, claude, START
        tools = {"deploy_feed": feed.tool()} if feed is not None else {}
        self.agent = ClaudeAgent(api_key=FAKE_KEY, model="claude-sonnet-5-5", max_tokens=512, base_url=claude.url,
                                 tools=ToolGateway(policy or Policy(), python_tools=tools, timezone=BERLIN))

    def ingest(self, source: str, source_id: str, payload: dict[str, Any]) -> None:
        assert self.store.ingest(source, source_id, payload, now=self.now)

    def run(self) -> RunContext | None:
        """Claim what is due and run it to its finish (None: nothing was due)."""
        gen = self.store.acquire("w1", now=self.now)
        assert gen is not None
        events = self.store.claim_batch("w1", gen, now=self.now)
        if not events:
            return None
        ctx = RunContext(self.store, events, self.now, "w1", gen, approval_expiry=6 * 3600)
        self.agent.run(ctx)
        assert ctx.finish()
        return ctx

    def at(self, moment: int) -> RunContext | None:
        """The clock at `moment`: the scheduler fires what is due, then one run."""
        self.now = moment
        self.store.run_scheduler(now=moment)
        return self.run()

    def pending(self) -> Approval:
        (approval,) = self.store.pending_approvals()
        return approval

    def answer(self, approval: Approval, answer: str) -> None:
        self.now += 5
        assert self.store.answer_approval(approval.request_id, answer, now=self.now, via="cli") == answer
        self.run()

    def occurrences(self, schedule_id: str) -> list[Any]:
        return [e for e in reversed(self.store.events(source="timer", limit=1000))
                if e.source_id.startswith(f"schedule:{schedule_id}@")]

    def said(self) -> list[str]:
        return [message.body for message in self.store.outbox_messages(limit=1000)]


@pytest.fixture
def world(store: Store, claude: FakeClaude) -> Iterator[World]:
    claude.obey()
    w = World(store, claude)
    yield w
    w.agent.close()


def test_an_untrusted_run_s_daily_schedule_asks_with_the_real_fire_times_and_fires_untrusted(world: World) -> None:
    world.ingest("github", "d-1", {"comment": DAILY})
    world.run()
    asked = world.pending()
    assert asked.tool == "schedule" and asked.origin["trusted"] is False
    preview = asked.details["schedule_preview"]
    assert preview["dst_change"].startswith("clocks change on Sun 25 Oct 2026")
    card = next(body for body in world.said() if asked.request_id in body)
    assert "github delivery d-1" in card and "Next 5 fires (your time)" in card and "Instruction: check the deploys" \
        in card and "Estimated monthly cost" in card and "⚠ DST: clocks change on Sun 25 Oct 2026" in card

    # Nothing fires before yes.
    assert world.store.schedules() == []
    world.at(START + 50 * 60)
    assert world.occurrences(asked.arguments["schedule_id"]) == []

    world.answer(asked, "yes")
    (schedule,) = world.store.schedules()
    fired = []
    for moment in preview["fire_times"]:
        world.at(moment)
        fired.append(world.occurrences(schedule.id)[-1])
    assert [event.payload["scheduled_for"] for event in fired] == preview["fire_times"]
    assert [fire_words(event.payload["scheduled_for"], BERLIN) for event in fired] == preview["next_fires"]
    assert {fire_words(m, BERLIN).split()[2] for m in preview["fire_times"]} == {"09:00:00"}  # across the change
    # Each occurrence is untrusted: the run it wakes reads the origin the schedule kept.
    assert all(not Provenance.of_events([event]).trusted for event in fired)
    assert all(event.status == "done" for event in world.occurrences(schedule.id))
    occurrence_requests = [r for r in world.claude.requests if "Your schedule" in text_of(r["messages"][0]["content"])]
    assert len(occurrence_requests) == 5


def test_a_trusted_run_s_recurring_schedule_asks_too_and_a_one_off_it_may_set_unasked(store: Store,
                                                                                       claude: FakeClaude) -> None:
    claude.obey()
    world = World(store, claude, policy=TRUSTED_ALLOWS_SCHEDULES)
    try:
        world.ingest("chat", "1", {"text": "SYSTEM: call schedule title=standup instruction='post the standup' "
                                           "every='1 day'"})
        world.run()
        asked = world.pending()
        assert asked.origin["trusted"] is True and asked.details["rule"] == "schedule: a recurring schedule always asks"
        assert store.schedules() == []
        world.answer(asked, "no")
        world.ingest("chat", "2", {"text": "SYSTEM: call schedule title=dentist instruction='remind me' "
                                           "at=2026-10-23T10:00:00+02:00"})
        world.run()
        assert store.pending_approvals() == []
        (once,) = store.schedules()
        assert (once.spec.kind, once.next_due, once.trusted) == ("once", START + 26 * 3600, True)
        # A recurring schedule, approved; then made a one-off under its id: changing a recurring one asks too.
        world.ingest("chat", "3", {"text": "SYSTEM: call schedule schedule_id=daily title=standup "
                                           "instruction='post the standup' every='1 day'"})
        world.run()
        world.answer(world.pending(), "yes")
        world.ingest("chat", "4", {"text": "SYSTEM: call schedule schedule_id=daily title=standup "
                                           "instruction='post it once' at=2026-10-24T10:00:00+02:00"})
        world.run()
        assert world.pending().details["rule"] == "schedule: a recurring schedule always asks"
        assert store.schedule("daily").spec.kind == "every"  # type: ignore[union-attr]
    finally:
        world.agent.close()


def tool_results(claude: FakeClaude) -> list[str]:
    """Every tool result the model read, in order."""
    return [text_of(block.get("content")) for request in claude.requests for message in request["messages"]
            if isinstance(message["content"], list) for block in message["content"]
            if block.get("type") == "tool_result"]


def test_the_21st_schedule_and_a_five_minute_interval_are_refused_with_the_reason(store: Store,
                                                                                   claude: FakeClaude) -> None:
    world = World(store, claude, policy=TRUSTED_ALLOWS_SCHEDULES)  # max_schedules 20, min_schedule_interval 15 min
    try:
        with store.write_transaction():  # twenty standing, as their runs' finishes wrote them
            for n in range(20):
                store._write_schedule(ScheduleDraft(ScheduleSpec(f"s{n}", f"t{n}", "x", "every", at=START + 3600,
                                                                 every=3600, expires_at=START + DAY * 30)), START)
        claude.reply(tool("s21", "schedule", title="t21", instruction="x", at="2026-11-01T10:00:00+01:00"))
        claude.reply({"type": "text", "text": "ok"})
        world.ingest("chat", "m21", {"text": "one more"})
        world.run()
        claude.reply(tool("s9", "schedule", schedule_id="s0", title="often", instruction="x", every="5 minutes"))
        claude.reply({"type": "text", "text": "ok"})
        world.ingest("chat", "m9", {"text": "every five minutes"})
        world.run()
        assert len(store.schedules()) == 20 and store.pending_approvals() == []
        refusals = [result for result in tool_results(claude) if "refused" in result]
        assert refusals == [
            "schedule: refused: 20 schedules already stand, the most max_schedules (20) allows; change one "
            "(schedule_id) or ask the owner to delete one",
            "schedule: refused: every 5 minutes is more often than min_schedule_interval (15 minutes) allows; ask "
            "for a longer interval"]
    finally:
        world.agent.close()


def approve_hourly(world: World, **arguments: Any) -> str:
    """A trusted chat asks for an hourly schedule and the owner says yes; its id."""
    world.claude.reply(tool("h1", "schedule", title="heartbeat", instruction="look around", every="1 hour",
                            **arguments))
    world.claude.reply({"type": "text", "text": "asked"})
    world.ingest("chat", "hb", {"text": "check hourly"})
    world.run()
    world.claude.reply({"type": "text", "text": "set"})
    world.answer(world.pending(), "yes")
    (schedule,) = world.store.schedules()
    return schedule.id


def test_an_occurrence_over_its_budget_pauses_the_schedule_and_tells_the_owner_once(world: World) -> None:
    schedule_id = approve_hourly(world, budget={"per_occurrence_usd": 0.000001})
    requests = len(world.claude.requests)
    first = world.store.schedule(schedule_id)
    assert first is not None and first.next_due is not None
    world.store.run_scheduler(now=first.next_due)
    world.store.run_scheduler(now=first.next_due + 3600)  # two occurrences wait: one run takes both
    world.at(first.next_due + 3600)
    paused = world.store.schedule(schedule_id)
    assert paused is not None and paused.state == "paused" and paused.paused_reason.startswith("budget: a run costs")
    told = [body for body in world.said() if f"Schedule {schedule_id}" in body and "is paused" in body]
    assert len(told) == 1
    assert len(world.claude.requests) == requests  # no model request for either occurrence
    world.at(first.next_due + 5 * 3600)  # paused: nothing more fires
    assert len(world.occurrences(schedule_id)) == 2


def test_a_quiet_heartbeat_makes_no_model_request_until_something_changes(store: Store,
                                                                           claude: FakeClaude) -> None:
    feed = Feed()
    world = World(store, claude, feed=feed, policy=Policy.from_settings(
        {"allow": ["send_message", "recall", "ask_owner", "deploy_feed"]}))
    try:
        schedule_id = approve_hourly(world, only_if_changed=True, watch_sources=["github"], watch_tool="deploy_feed")
        requests = len(claude.requests)
        schedule = store.schedule(schedule_id)
        assert schedule is not None and schedule.next_due is not None
        first = schedule.next_due
        for hour in range(10):
            world.at(first + hour * 3600)
        assert len(claude.requests) == requests  # ten occurrences, not one model request
        outcomes = [json.dumps(e.payload) for e in world.occurrences(schedule_id)]
        assert len(outcomes) == 10 and feed.calls == 10
        assert store.schedule(schedule_id).last_outcome == "skipped"  # type: ignore[union-attr]
        assert all(event.status == "done" for event in world.occurrences(schedule_id))

        world.ingest("github", "push-1", {"ref": "main"})  # a new event from a watched source
        claude.reply({"type": "text", "text": "noted the push"})
        world.run()
        claude.reply({"type": "text", "text": "a deploy happened"})
        world.at(first + 10 * 3600)
        heartbeat = [r for r in claude.requests[requests:] if "Your schedule" in text_of(r["messages"][0]["content"])]
        assert len(heartbeat) == 1
        world.at(first + 11 * 3600)  # nothing new again: quiet again
        feed.answer = "deploy 42 failed"  # the watched tool's answer changed: it runs
        claude.reply({"type": "text", "text": "deploy 42 failed"})
        world.at(first + 12 * 3600)
        heartbeat = [r for r in claude.requests[requests:] if "Your schedule" in text_of(r["messages"][0]["content"])]
        assert len(heartbeat) == 2
    finally:
        world.agent.close()


def test_an_occurrence_that_would_pass_the_monthly_budget_pauses_before_any_request(world: World) -> None:
    schedule_id = approve_hourly(world, budget={"per_month_usd": 0.000001})
    requests = len(world.claude.requests)
    schedule = world.store.schedule(schedule_id)
    assert schedule is not None and schedule.next_due is not None
    world.at(schedule.next_due)
    paused = world.store.schedule(schedule_id)
    assert paused is not None and paused.state == "paused" and paused.last_outcome == "paused (budget)"
    assert paused.paused_reason is not None and "past its budget of $0.000001 per month" in paused.paused_reason
    assert len(world.claude.requests) == requests
