"""The built-in offline agent, run against a real inbox file."""

from __future__ import annotations

from typing import Any

import pytest

from console.agents.base import RunContext
from console.agents.offline import OfflineAgent, PoisonEventError, summarise_webhook
from console.core import Event, Store


def said(ctx: RunContext) -> list[tuple[str, bool]]:
    """What a run said, as (text, urgent)."""
    return [(message.body, message.urgent) for message in ctx.messages]

NOW = 1_790_000_000


def run(store: Store, items: list[tuple[str, str, Any]], now: int = NOW) -> RunContext:
    store.ingest_many(items, now=now)
    gen = store.acquire("agent-test", now=now)
    assert gen is not None
    events = store.claim_batch("agent-test", gen, now=now)
    ctx = RunContext(store, events, now, "agent-test", gen, approval_expiry=600)
    OfflineAgent().run(ctx)
    assert ctx.finish()
    return ctx


def fire_timer(store: Store, timer_id: str, payload: dict[str, Any], now: int = NOW) -> None:
    """A timer event the way the engine makes one (timer events cannot be ingested from outside)."""
    store.add_timer(timer_id, now, payload, now=now)
    assert store.run_scheduler(now=now) == 1


def event(source: str, payload: Any) -> Event:
    return Event(1, source, "id-1", payload, "running", 1, 1, None)


def test_a_chat_burst_gets_one_reply(store: Store) -> None:
    ctx = run(store, [("chat", f"m{n}", {"text": f"line {n}"}) for n in range(3)])
    assert len(ctx.messages) == 1
    text, urgent = said(ctx)[0]
    assert text.startswith("Noted your 3 messages") and "line 0" in text and "line 2" in text and not urgent


def test_a_risky_request_asks_for_approval_urgently(store: Store) -> None:
    ctx = run(store, [("chat", "r1", {"text": "please refund order 881"})])
    assert [a.action for a in ctx.approvals] == ["please refund order 881"]
    (text, urgent), = said(ctx)
    # A question to the owner (no tool behind it), worded as one, with where it came from.
    assert urgent and text.startswith("asked by a run from your chat #1\n")  # the origin line first (issue 31)
    request_id = ctx.approvals[0].request_id
    assert text.split("\n")[1].startswith(f"Question for you [{request_id}]: “please refund order 881”")
    pending = store.pending_approvals()
    assert [(p.request_id, p.expires_at) for p in pending] == [(ctx.approvals[0].request_id, NOW + 600)]
    assert store.load_session(ctx.approvals[0].request_id)["action"] == "please refund order 881"


def test_poison_fails_every_run(store: Store) -> None:
    with pytest.raises(PoisonEventError):
        run(store, [("webhook", "p1", {"poison": True})])


def test_github_and_stripe_payloads_are_summarised_in_one_line() -> None:
    github = summarise_webhook(event("github", {
        "action": "opened", "pull_request": {"number": 12, "title": "Fix the lease"},
        "repository": {"full_name": "me/agent"}, "sender": {"login": "alice"}}))
    assert github == "GitHub: PR #12 opened in me/agent by alice: Fix the lease"
    stripe = summarise_webhook(event("stripe", {
        "id": "evt_1", "type": "charge.succeeded", "data": {"object": {"amount": 1250, "currency": "eur"}}}))
    assert stripe == "Stripe: charge.succeeded 12.50 EUR (evt_1)"
    other = summarise_webhook(event("ci", {"status": "green", "job": "build"}))
    assert other == "ci: event id-1 (job, status)"
    assert "\n" not in github + stripe + other


def test_timer_with_missed_runs_says_so(store: Store) -> None:
    store.add_timer("water", NOW - 3 * 3600, {"text": "water the plants"}, every=3600)
    store.run_scheduler(now=NOW)
    gen = store.acquire("t", now=NOW)
    assert gen is not None
    events = store.claim_batch("t", gen, now=NOW)
    ctx = RunContext(store, events, NOW, "t", gen, approval_expiry=600)
    OfflineAgent().run(ctx)
    assert said(ctx) == [("Timer: water the plants (3 missed runs coalesced)", False)]


def test_a_quiet_day_digest_is_silent(store: Store) -> None:
    fire_timer(store, "daily-digest", {"task": "digest"})
    ctx = run(store, [])
    assert [e.source for e in ctx.events] == ["timer"] and ctx.messages == []


def test_digest_reports_dead_events_and_expired_approvals(store: Store) -> None:
    store.ingest("hook", "bad", {"x": 1}, now=NOW - 100)
    at = NOW - 400
    for _ in range(3):
        gen = store.acquire("w", now=at)
        assert gen is not None
        claimed = store.claim_batch("w", gen, now=at)
        store.finish("w", gen, [e.id for e in claimed], now=at, error="broken")
        at += 100
    assert store.release("w", gen, now=at)
    store.request_approval("apr-x", "deploy prod", now=NOW - 100, expires_in=10)
    store.run_scheduler(now=NOW - 50)
    fire_timer(store, "daily-digest", {"task": "digest"})
    ctx = run(store, [], now=NOW)
    (text, _), = said(ctx)
    assert "\nDigest (last day):" in text and "dead #" in text and "expired approval apr-x" in text


def test_a_webhook_as_the_receiver_stores_it_is_summarised() -> None:
    stored = {"type": "push", "body": {"repository": {"full_name": "me/agent"}, "sender": {"login": "bob"},
                                       "commits": [{}, {}]}}
    assert summarise_webhook(event("github", stored)) == "GitHub: 2 commit(s) pushed to me/agent by bob"
    issue = {"type": "issues", "body": {"action": "closed", "issue": {"number": 3, "title": "Flaky"},
                                        "repository": {"full_name": "me/agent"}, "sender": {"login": "amy"}}}
    assert summarise_webhook(event("github", issue)) == "GitHub: issue #3 closed in me/agent by amy: Flaky"
