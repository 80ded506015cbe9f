"""Where each approval's outcome came from, recorded by the one answer path; announcements linked to their
request by the outbox itself (no parsing of message text)."""

from __future__ import annotations

import pytest

from console.agents.base import RunContext
from console.agents.offline import OfflineAgent
from console.core import Batch, Store

T = 1_000_000
HOUR = 3_600


def test_the_path_that_settles_is_recorded_and_later_answers_do_not_change_it(store: Store) -> None:
    store.request_approval("a", "refund order 1", now=T, expires_in=HOUR)
    assert store.answer_approval("a", "yes", now=T + 1, via="telegram") == "yes"
    assert store.answer_approval("a", "no", now=T + 2, via="cli") == "yes"
    approval = store.approval("a")
    assert approval is not None and (approval.outcome, approval.answered_via, approval.resolved_at) == (
        "yes", "telegram", T + 1)


def test_the_expiry_timer_and_a_late_answer_say_which_of_them_settled(store: Store) -> None:
    store.request_approval("timer", "deploy", now=T, expires_in=HOUR)
    store.request_approval("late", "refund", now=T, expires_in=HOUR)
    assert store.run_scheduler(now=T + HOUR) == 2  # both expiry timers fire ...
    store.request_approval("late-2", "merge", now=T, expires_in=HOUR)
    assert store.answer_approval("late-2", "yes", now=T + HOUR, via="ntfy") == "expired"  # ... a tap comes too late
    vias = {a.request_id: (a.outcome, a.answered_via) for a in store.resolved_approvals()}
    assert vias == {"timer": ("expired", "expiry"), "late": ("expired", "expiry"), "late-2": ("expired", "ntfy")}


def test_an_unknown_answer_path_is_refused_and_changes_nothing(store: Store) -> None:
    store.request_approval("a", "refund", now=T, expires_in=HOUR)
    with pytest.raises(ValueError, match="answer comes from one of console, cli, ntfy, telegram, api"):
        store.answer_approval("a", "yes", now=T + 1, via="sms")
    assert store.approval("a").outcome is None  # type: ignore[union-attr]
    assert store.answer_approval("a", "yes", now=T + 1) == "yes"
    assert store.approval("a").answered_via == "api"  # type: ignore[union-attr]


def test_status_lists_recent_outcomes_newest_first_and_bounded(store: Store) -> None:
    for n in range(12):
        store.request_approval(f"r{n}", f"action {n}", now=T, expires_in=HOUR)
        store.answer_approval(f"r{n}", "yes" if n % 2 else "no", now=T + n, via="console" if n % 3 else "cli")
    store.request_approval("open", "still asking", now=T, expires_in=HOUR)
    recent = store.status(now=T + 20)["approvals_recent"]
    assert [item["request_id"] for item in recent] == [f"r{n}" for n in range(11, 1, -1)]
    # What was answered, and the whole call it approved (tool, arguments, details), so status names every argument.
    assert all(set(item) == {"request_id", "action", "outcome", "answered_via", "answered_at", "tool", "arguments",
                             "details"} for item in recent)
    assert recent[0] == {"request_id": "r11", "action": "action 11", "outcome": "yes", "answered_via": "console",
                         "answered_at": T + 11, "tool": None, "arguments": None, "details": {}}
    assert recent[2]["answered_via"] == "cli"


def test_an_announcement_carries_its_request_into_the_batch(store: Store) -> None:
    store.ingest("chat", "c1", {"text": "please refund order 881"}, now=T)
    store.ingest("chat", "c2", {"text": "hello"}, now=T)
    gen = store.acquire("w", now=T)
    assert gen is not None
    ctx = RunContext(store, store.claim_batch("w", gen, now=T), T, "w", gen, approval_expiry=600)
    OfflineAgent().run(ctx)
    assert ctx.finish()
    [request] = ctx.approvals
    sent: list[Batch] = []
    assert store.dispatch(sent.append, now=T) == 2
    [batch] = sent
    assert batch.urgent and batch.approval_ids == [None, request.request_id]
    # The offline agent asks the owner a question about a refund (ask_owner): announced as a question.
    assert batch.bodies[1].split("\n")[1].startswith(f"Question for you [{request.request_id}]")  # under its origin
    assert [m.approval_id for m in store.outbox_messages()] == [request.request_id, None]


def test_a_queued_announcement_goes_in_the_urgent_lane(store: Store) -> None:
    store.request_approval("q", "deploy", now=T, expires_in=HOUR)
    store.queue_message("Approval needed [q]: deploy", now=T, approval_id="q")
    [message] = store.outbox_messages()
    assert (message.urgent, message.approval_id) == (True, "q")
