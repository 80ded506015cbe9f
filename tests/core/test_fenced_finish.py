"""What a run produces for the inbox commits with its fenced finish, or not at all (issue 8.1)."""

from __future__ import annotations

import pytest

from console.agents.base import RunContext
from console.core import ApprovalDraft, StaleGeneration, Store, TimerDraft, approval_id

T = 1_000_000


def run_context(store: Store, holder: str, now: int) -> RunContext:
    gen = store.acquire(holder, now=now)
    assert gen is not None
    return RunContext(store, store.claim_batch(holder, gen, now=now), now, holder, gen, approval_expiry=600)


def test_asks_and_timers_are_written_by_the_finish_and_only_by_it(store: Store) -> None:
    store.ingest("chat", "m-1", {"text": "refund order 881"}, now=T)
    ctx = run_context(store, "A", T)
    request = ctx.ask("refund order 881", {"why": "duplicate charge"}, state={"step": 3})
    ctx.set_timer("follow-up", T + 3600, {"text": "check the refund"})
    ctx.say("Approval needed")
    assert store.pending_approvals() == [] and store.load_session(request.request_id) is None
    assert store.timer("follow-up") is None  # nothing is written before the finish
    assert ctx.finish()
    (approval,) = store.pending_approvals()
    assert (approval.request_id, approval.action, approval.expires_at) == (request.request_id, "refund order 881",
                                                                            T + 600)
    assert approval.event_id == ctx.events[0].id and approval.details == {"why": "duplicate charge"}
    assert store.load_session(request.request_id)["state"] == {"step": 3}
    timer = store.timer("follow-up")
    assert timer is not None and timer.due == T + 3600


@pytest.mark.parametrize("ending", ["failed", "fenced"])
def test_a_run_that_fails_or_is_fenced_leaves_nothing_half_asked(store: Store, ending: str) -> None:
    store.ingest("chat", "m-1", {"text": "deploy"}, now=T)
    ctx = run_context(store, "A", T)
    ctx.ask("deploy web", state={"conversation": "A's"})
    ctx.set_timer("later", T + 60)
    if ending == "failed":
        assert ctx.finish(error="RuntimeError: boom")
    else:
        assert store.acquire("B", now=T + 121) == 2  # A's lease lapsed and B took over
        assert ctx.finish(now=T + 122) is False
        assert [(r.kind, r.holder) for r in store.refused_finishes()] == [("finish", "A")]
    assert store.pending_approvals() == [] and store.timer("later") is None
    assert store.connection.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0


def test_a_stale_run_cannot_replace_the_session_of_a_request_that_stands(store: Store) -> None:
    """The hijack's second half: two runs ask for the same event; the one that finishes fenced is refused,
    and even a retry that asks the same id again keeps the first request's session and deadline."""
    store.ingest("chat", "m-1", {"text": "tidy"}, now=T)
    stale = run_context(store, "A", T)
    stale.ask("delete branch old-ui", state={"by": "A"})
    fresh = run_context(store, "B", T + 121)  # A's lease lapsed: B takes over and re-claims the event at once
    assert [e.id for e in fresh.events] == [e.id for e in stale.events]
    fresh.ask("delete branch old-ui", state={"by": "B"})
    assert fresh.finish()
    assert stale.finish(now=T + 130) is False
    rid = approval_id(fresh.events[0].id, "delete branch old-ui")
    assert store.load_session(rid)["state"] == {"by": "B"}
    store.finish("B", fresh.gen, [], now=T + 140, approvals=[
        ApprovalDraft(rid, "delete branch old-ui", 9999, session={"state": {"by": "a replay"}}, event_id=1)])
    approval = store.approval(rid)
    assert approval is not None and approval.expires_at == T + 121 + 600
    assert store.load_session(rid)["state"] == {"by": "B"}


def test_approval_ids_are_anchored_on_the_event_and_the_action() -> None:
    assert approval_id(7, "refund order 1") == approval_id(7, "refund order 1")
    assert approval_id(7, "refund order 1") != approval_id(7, "refund order 2")
    assert approval_id(7, "refund order 1") != approval_id(8, "refund order 1")
    assert approval_id(7, "refund order 1").startswith("apr-7-")


def test_asking_the_same_thing_twice_in_a_run_is_one_request(store: Store) -> None:
    store.ingest("chat", "m-1", {}, now=T)
    ctx = run_context(store, "A", T)
    assert ctx.ask("pay invoice 12") is ctx.ask("pay invoice 12")
    assert ctx.finish() and len(store.pending_approvals()) == 1


def test_a_bad_timer_fails_the_run_where_it_is_set(store: Store) -> None:
    store.ingest("chat", "m-1", {}, now=T)
    ctx = run_context(store, "A", T)
    with pytest.raises(ValueError, match="invalid cron"):
        ctx.set_timer("bad", T, cron="not a cron")
    assert ctx.timers == []
    assert store.finish("A", ctx.gen, [ctx.events[0].id], now=T, timers=[TimerDraft("ok", T + 5)])
    assert store.timer("ok") is not None


def test_once_the_fence_is_up_the_run_stops_at_its_next_call(store: Store) -> None:
    store.ingest("chat", "m-1", {}, now=T)
    ctx = run_context(store, "A", T)
    ctx.fence.set()  # the worker's renewer learned the lease is gone
    for call in (lambda: ctx.say("hi"), lambda: ctx.ask("deploy"), lambda: ctx.step("k", lambda: 1),
                 lambda: ctx.set_timer("t", T + 5)):
        with pytest.raises(StaleGeneration, match="lost the lease"):
            call()
    assert store.journal_step("k") is None and ctx.messages == [] and ctx.drafts == []


def test_a_resumed_run_reads_the_outcome_and_the_action_from_the_approvals_row(store: Store) -> None:
    store.ingest("chat", "m-1", {"text": "refund"}, now=T)
    ctx = run_context(store, "A", T)
    request = ctx.ask("refund order 881", state={"pending": "refund order 881"})
    assert ctx.finish()
    # Whatever the saved session says, the row the owner saw is what a resume reads.
    store.connection.execute("UPDATE sessions SET state = ? WHERE session_id = ?",
                             ('{"action": "refund order 999"}', request.request_id))
    assert store.answer_approval(request.request_id, "yes", now=T + 10) == "yes"
    resume = run_context(store, "A", T + 10)
    (event,) = resume.events
    resumed = resume.resumed(event)
    assert resumed is not None
    assert (resumed.request_id, resumed.answer, resumed.action, resumed.event_id) == (
        request.request_id, "yes", "refund order 881", ctx.events[0].id)
