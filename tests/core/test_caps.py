"""Caps (issue 18.7): world-changing calls per run and per hour, messages per hour. Counted from the inbox (a
reopened store, a restart, carries on), fenced where they write, and the owner told once per crossing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from console.agents.base import RunContext
from console.core import StaleGeneration, Store

T = 1_000_000


@pytest.fixture
def capped(inbox_target: str) -> Iterator[Store]:
    with Store.open(inbox_target, seed=7, max_tool_calls_per_run=3, max_tool_calls_per_hour=5,
                    max_messages_per_hour=4) as store:
        yield store


def run_context(store: Store, holder: str, now: int) -> RunContext:
    gen = store.acquire(holder, now=now)
    assert gen is not None
    return RunContext(store, store.claim_batch(holder, gen, now=now), now, holder, gen, approval_expiry=600)


def slots(ctx: RunContext, count: int, prefix: str = "k") -> list[str | None]:
    """Take `count` slots for distinct steps; the cap each one reached (None: it may run)."""
    event = ctx.events[0]
    return [None if (reached := ctx.take_call_slot(f"{prefix}{n}", "mcp__shop__refund", event=event)) is None
            else reached.cap for n in range(count)]


def test_a_run_makes_at_most_its_cap_and_a_replayed_step_costs_no_slot(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    assert slots(ctx, 5) == [None, None, None, "max_tool_calls_per_run", "max_tool_calls_per_run"]
    assert slots(ctx, 3) == [None, None, None]  # the same steps again (a replay): already counted, no new slot
    assert capped.calls_in_last_hour(now=T) == 3
    assert len(ctx.cap_notices) == 1 and "3 world-changing tool calls" in ctx.cap_notices[0].text


def test_the_hourly_cap_counts_across_runs_and_a_reopened_store(capped: Store, inbox_target: str) -> None:
    for n in (1, 2):
        capped.ingest("chat", f"m{n}", {}, now=T)
    gen = capped.acquire("A", now=T)
    assert gen is not None
    first, second = capped.claim_batch("A", gen, now=T)
    ctx = RunContext(capped, [first], T, "A", gen, approval_expiry=600)
    assert slots(ctx, 3, "a") == [None, None, None]
    assert ctx.finish()
    with Store.open(inbox_target, max_tool_calls_per_run=3, max_tool_calls_per_hour=5) as again:  # a restart
        later = RunContext(again, [second], T + 60, "A", gen, approval_expiry=600)
        assert slots(later, 3, "b") == [None, None, "max_tool_calls_per_hour"]
        # An hour after the first three, they no longer count.
        later_gen = again.acquire("A", now=T + 3601)
        assert later_gen is not None
        hour_on = RunContext(again, [second], T + 3601, "A", later_gen, approval_expiry=600)
        assert slots(hour_on, 2, "c") == [None, "max_tool_calls_per_run"]


def test_a_retried_run_carries_on_its_events_count(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    assert slots(ctx, 2, "first") == [None, None]
    assert ctx.finish(error="boom")
    retry = run_context(capped, "A", T + 100)
    assert slots(retry, 2, "second") == [None, "max_tool_calls_per_run"]


def test_a_run_that_lost_its_lease_counts_nothing(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    assert capped.acquire("B", now=T + 10_000) is not None  # A's lease lapsed and B took over
    with pytest.raises(StaleGeneration):
        ctx.take_call_slot("k1", "mcp__shop__refund", event=ctx.events[0])
    assert capped.calls_in_last_hour(now=T + 10_000) == 0
    assert capped.refused_finish_count() >= 1


def test_an_approved_call_is_counted_but_never_stopped(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    assert slots(ctx, 3) == [None, None, None]
    assert ctx.take_call_slot("tool:approved", "mcp__shop__refund", event=ctx.events[0], capped=False) is None
    assert capped.calls_in_last_hour(now=T) == 4


def test_messages_past_the_cap_are_held_the_owner_is_told_once_and_can_release_them(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    for n in range(6):
        ctx.say(f"message {n}", urgent=True)
    assert ctx.finish()
    bodies = [m.body for m in reversed(capped.outbox_messages())]
    assert bodies[:4] == [f"message {n}" for n in range(4)]
    (notice,) = bodies[4:]
    assert "cap of 4 messages" in notice and "agent-console held release" in notice
    assert [h.body for h in capped.held_messages()] == ["message 4", "message 5"]
    assert capped.outbox_counts()["held"] == 2

    capped.ingest("chat", "m2", {}, now=T + 60)
    later = run_context(capped, "A", T + 60)
    later.say("one more")
    assert later.finish()
    assert len(capped.outbox_messages()) == 5  # held, and no second notice within the hour
    assert [h.body for h in capped.held_messages()] == ["message 4", "message 5", "one more"]

    first = capped.held_messages()[0].id
    assert capped.release_held([first], now=T + 120) == [first]
    assert capped.outbox_messages()[0].body == "message 4"
    assert len(capped.release_held(now=T + 120)) == 2
    assert capped.held_messages() == [] and capped.outbox_counts()["held"] == 0
    assert [m.body for m in capped.outbox_messages()[:2]] == ["one more", "message 5"]


def test_a_held_reply_to_a_chat_still_answers_that_chat_once_released(capped: Store) -> None:
    """A run answering a Telegram message, past the message cap: its replies are held, and once the owner releases
    them they go back to that chat as replies to that message (the outbox's reply_to), not to the owner's default
    chat as if nobody had asked. The held row lost reply_to before."""
    capped.take_chat_updates("telegram", "telegram", now=T, cursor="3", events=[("5:2", {"text": "status?"})])
    ctx = run_context(capped, "A", T)
    for n in range(5):
        ctx.say(f"reply {n}")
    assert ctx.finish()
    [held] = capped.held_messages()
    assert held.body == "reply 4"
    assert capped.release_held(now=T + 60) == [held.id]
    released = capped.outbox_messages()[0]
    assert released.body == "reply 4"
    assert capped.outbox_reply_to(released.id) == "telegram:5:2"


def test_an_approvals_announcement_is_never_held(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    for n in range(4):
        ctx.say(f"message {n}")
    request = ctx.ask("refund order 881")
    ctx.say(f"Approval needed [{request.request_id}]", announces=request)
    assert ctx.finish()
    announced = [m for m in capped.outbox_messages() if m.approval_id == request.request_id]
    assert len(announced) == 1 and capped.held_messages() == []


def test_a_fenced_finish_holds_and_counts_nothing(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    for n in range(6):
        ctx.say(f"message {n}")
    assert capped.acquire("B", now=T + 10_000) is not None
    assert not ctx.finish(now=T + 10_000)
    assert capped.held_messages() == [] and capped.outbox_messages() == []
    assert capped.messages_in_last_hour(now=T + 10_000) == 0


def test_zero_turns_a_cap_off(inbox_target: str) -> None:
    with Store.open(inbox_target, max_tool_calls_per_run=0, max_tool_calls_per_hour=0,
                    max_messages_per_hour=0) as store:
        store.ingest("chat", "m1", {}, now=T)
        ctx = run_context(store, "A", T)
        assert slots(ctx, 30) == [None] * 30
        for n in range(30):
            ctx.say(f"message {n}")
        assert ctx.finish()
        assert len(store.outbox_messages()) == 30 and store.held_messages() == []


def test_prune_forgets_old_counts_and_released_messages_but_never_a_held_one(capped: Store) -> None:
    capped.ingest("chat", "m1", {}, now=T)
    ctx = run_context(capped, "A", T)
    assert slots(ctx, 2) == [None, None]
    for n in range(6):
        ctx.say(f"message {n}")
    assert ctx.finish()
    capped.release_held([capped.held_messages()[0].id], now=T)
    later = T + 3 * 86_400
    capped.prune(older_than=86_400, now=later)
    assert capped.connection.execute("SELECT COUNT(*) FROM cap_uses").fetchall()[0][0] == 0
    assert [h.body for h in capped.held_messages()] == ["message 5"]  # still held: only the owner lets it go
    assert capped.connection.execute("SELECT COUNT(*) FROM held_messages").fetchall()[0][0] == 1
