"""Deferred tool calls: one outcome per request (answer or expiry), the deadline checked by the answer itself."""

from __future__ import annotations

import pytest

from console.core import Store

T = 1_000_000
HOUR = 3_600


def test_an_unanswered_request_expires_into_an_inbox_event(store: Store) -> None:
    assert store.request_approval("refund-1", "refund order 1", now=T, expires_in=4 * HOUR,
                                  details={"amount": 120}, session_id="s-9") is True
    [pending] = store.pending_approvals()
    assert (pending.request_id, pending.expires_at, pending.seconds_left(T + HOUR)) == ("refund-1", T + 4 * HOUR,
                                                                                         3 * HOUR)
    assert store.run_scheduler(now=T + 4 * HOUR - 1) == 0
    assert store.run_scheduler(now=T + 4 * HOUR) == 1
    event = store.find_event("approval", "refund-1")
    assert event is not None and event.status == "pending"  # it wakes the worker, which resumes session s-9
    assert event.payload["answer"] == "expired" and event.payload["action"] == "refund order 1"
    approval = store.approval("refund-1")
    assert approval is not None
    assert (approval.outcome, approval.resolved_at, approval.session_id, approval.details) == (
        "expired", T + 4 * HOUR, "s-9", {"amount": 120})
    assert store.pending_approvals() == []
    assert [a.request_id for a in store.resolved_approvals()] == ["refund-1"]


def test_the_first_answer_stands(store: Store) -> None:
    store.request_approval("deploy-7", "deploy to production", now=T, expires_in=HOUR)
    assert store.answer_approval("deploy-7", "no", now=T + 60) == "no"
    assert store.answer_approval("deploy-7", "yes", now=T + 120) == "no"
    assert store.answer_approval("deploy-7", "yes", now=T + 2 * HOUR) == "no"  # even after the deadline
    store.run_scheduler(now=T + 2 * HOUR)
    assert [e.payload["answer"] for e in store.events(source="approval")] == ["no"]
    event = store.find_event("approval", "deploy-7")
    assert event is not None and event.duplicates == 2  # every later answer is in the ledger


def test_the_deadline_is_checked_by_the_answer_itself(store: Store) -> None:
    store.request_approval("a", "x", now=T, expires_in=100)
    store.request_approval("b", "x", now=T, expires_in=100)
    assert store.answer_approval("a", "yes", now=T + 99) == "yes"
    assert store.answer_approval("b", "yes", now=T + 100) == "expired"  # at the deadline: too late


def test_requesting_again_does_not_extend_the_deadline(store: Store) -> None:
    assert store.request_approval("r", "refund", now=T, expires_in=HOUR) is True
    assert store.request_approval("r", "refund", now=T + 50 * 60, expires_in=HOUR) is False
    assert store.answer_approval("r", "yes", now=T + HOUR + 1) == "expired"


def test_a_request_never_made_is_unknown_and_stores_nothing(store: Store) -> None:
    assert store.answer_approval("nope", "yes", now=T) == "unknown"
    assert store.events() == [] and store.approval("nope") is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.answer_approval("r", "maybe", now=T), "'yes' or 'no'"),
        (lambda s: s.request_approval("", "x", now=T, expires_in=10), "request id"),
        (lambda s: s.request_approval("r2", "x", now=T, expires_in=0), "expires_in"),
    ],
)
def test_bad_approval_input_is_refused(store: Store, call: object, message: str) -> None:
    store.request_approval("r", "refund", now=T, expires_in=HOUR)
    with pytest.raises(ValueError, match=message):
        call(store)  # type: ignore[operator]
    assert [a.request_id for a in store.pending_approvals()] == ["r"]
    assert store.events() == []


def test_a_second_connection_sees_the_same_outcome(store: Store) -> None:
    other = store.reopen()
    try:
        store.request_approval("r", "refund", now=T, expires_in=HOUR)
        assert other.answer_approval("r", "yes", now=T + 10) == "yes"
        assert store.answer_approval("r", "no", now=T + 20) == "yes"
        approval = store.approval("r")
        assert approval is not None and approval.outcome == "yes"
    finally:
        other.close()


def test_the_answer_does_not_depend_on_the_expiry_timer_row(store: Store) -> None:
    # The API refuses to touch an expiry timer, but a file edited by hand (or by an older version) may
    # lack it or hold another timer under its id: the approval itself (its deadline, its action) is what
    # the answer path must go by.
    from console.core.approvals import expiry_timer_id

    store.request_approval("kept", "deploy web", now=T, expires_in=HOUR)
    store.request_approval("late", "refund order 2", now=T, expires_in=HOUR)
    store.request_approval("replaced", "drop table", now=T, expires_in=HOUR)
    conn = store.connection
    conn.execute("DELETE FROM timers WHERE id IN (?, ?)", (expiry_timer_id("kept"), expiry_timer_id("late")))
    conn.execute("UPDATE timers SET due = ?, every = 60, payload = ?, ev_source = NULL, ev_id = NULL WHERE id = ?",
                 (T + 60, '{"text": "a timer of the user\'s own"}', expiry_timer_id("replaced")))
    assert store.answer_approval("kept", "yes", now=T + 10) == "yes"
    assert store.answer_approval("late", "yes", now=T + HOUR) == "expired"
    assert store.answer_approval("replaced", "no", now=T + 2 * HOUR) == "expired"
    event = store.find_event("approval", "late")
    assert event is not None and event.payload == {"approval": "late", "answer": "expired", "action": "refund order 2"}
    assert [a.outcome for a in map(store.approval, ("kept", "late", "replaced"))] == ["yes", "expired", "expired"]


def test_an_approvals_expiry_timer_cannot_be_removed_paused_or_replaced(store: Store) -> None:
    store.request_approval("apr-9", "deploy", now=100, expires_in=60)
    for attempt in (lambda: store.remove_timer("expire:apr-9"), lambda: store.pause_timer("expire:apr-9"),
                    lambda: store.add_timer("expire:apr-9", 500, {"answer": "yes"})):
        with pytest.raises(ValueError, match="expiry of an approval"):
            attempt()
    store.run_scheduler(now=161)
    assert store.answer_approval("apr-9", "yes", now=162) == "expired"


def test_a_settled_approval_leaves_no_expiry_timer_behind(store: Store) -> None:
    store.add_timer("digest", T + 9 * HOUR, {}, every=24 * HOUR, now=T)
    for request_id in ("answered", "expired", "pending"):
        store.request_approval(request_id, f"deploy {request_id}", now=T, expires_in=HOUR + (request_id == "pending"))
    assert store.answer_approval("answered", "yes", now=T + 60) == "yes"
    # The answered one's expiry is no longer listed, nor the next timer to come due.
    assert [t.id for t in store.timers()] == ["expire:expired", "expire:pending", "digest"]
    assert store.run_scheduler(now=T + HOUR) == 1  # only the unanswered one expires
    assert store.approval("expired").outcome == "expired"  # type: ignore[union-attr]
    assert [t.id for t in store.timers()] == ["expire:pending", "digest"]
    assert store.answer_approval("pending", "no", now=T + HOUR) == "no"
    next_timer = store.next_timer()
    assert [t.id for t in store.timers()] == ["digest"] and next_timer is not None and next_timer.id == "digest"
    assert store.status(now=T + HOUR)["next_timer"]["id"] == "digest"
    assert store.run_scheduler(now=T + 2 * HOUR) == 0  # nothing left to fire for the settled approvals
    answered = store.find_event("approval", "answered")
    assert answered is not None and answered.duplicates == 0 and answered.payload["answer"] == "yes"


def test_an_answer_never_removes_a_timer_of_the_users_own_under_the_expiry_name(store: Store) -> None:
    from console.core.approvals import expiry_timer_id

    store.request_approval("apr-1", "deploy", now=T, expires_in=HOUR)
    store.connection.execute(  # an older version or a hand edit put the user's own timer under that id
        "UPDATE timers SET every = 60, ev_source = NULL, ev_id = NULL WHERE id = ?", (expiry_timer_id("apr-1"),))
    assert store.answer_approval("apr-1", "yes", now=T + 1) == "yes"
    assert [t.id for t in store.timers()] == [expiry_timer_id("apr-1")]


def test_the_waiting_approvals_read_as_a_window_of_the_soonest_and_a_count(store: Store) -> None:
    """A console reads what fits on screen and how many wait, not every waiting approval (the soak found a flood
    of asked calls growing the console)."""
    for n in range(5):
        store.request_approval(f"apr-{n}", f"act {n}", now=T, expires_in=500 - n)
    assert store.pending_approval_count() == 5
    assert [a.request_id for a in store.pending_approvals(limit=2)] == ["apr-4", "apr-3"]  # soonest deadline first
    assert len(store.pending_approvals()) == 5
    assert store.answer_approval("apr-4", "yes", now=T + 1) == "yes"
    assert store.pending_approval_count() == 4
    assert [a.request_id for a in store.pending_approvals(limit=2)] == ["apr-3", "apr-2"]
