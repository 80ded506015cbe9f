"""An answer whose event dies is told to the owner in the transaction that parks it dead, and listed until a retry
brings it back: what the owner said, what became of the call (not run, unknown, done) and why the event died."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from console.agents.base import RunContext
from console.core import RunOutcome, StaleGeneration, Store, approved_step_key

T = 1_000_000
TTL = 60
ACTION = 'mcp__shop__refund(order="881")'


def ask(store: Store, *, tool: str | None = "mcp__shop__refund") -> tuple[str, int]:
    """A run asks for the refund (or, with tool None, asks a plain question) and finishes."""
    store.ingest("chat", "m1", {"text": "refund order 881"}, now=T)
    gen = store.acquire("asker", now=T)
    assert gen is not None
    events = store.claim_batch("asker", gen, now=T)
    ctx = RunContext(store, events, T, "asker", gen, approval_expiry=3600)
    request = ctx.ask(ACTION, tool=tool, arguments={"order": "881"}) if tool else ctx.ask("Refund order 881?")
    assert ctx.finish()
    assert store.release("asker", gen, now=T)
    return request.request_id, events[0].id


def lose_every_attempt(store: Store, answer_id: int, start: int) -> int:
    """Each attempt's worker dies holding the event (its lease lapses); the claim after the last parks it dead.
    Returns the time of that claim."""
    at = start
    for attempt in range(store.options.max_attempts + 1):
        at += TTL + 1
        gen = store.acquire(f"worker-{attempt}", now=at)
        assert gen is not None
        claimed = store.claim_batch(f"worker-{attempt}", gen, now=at)
        assert [e.id for e in claimed] == ([answer_id] if attempt < store.options.max_attempts else [])
    return at


def notices(store: Store, event_id: int) -> list[tuple[str, bool]]:
    return [(m.body, m.urgent) for m in store.outbox_messages(limit=100) if m.event_id == event_id]


@pytest.fixture
def inbox(inbox_target: str) -> Iterator[Store]:
    with Store.open(inbox_target, lease_ttl=TTL, max_attempts=3, backoff_base=0, seed=7) as store:
        yield store


def test_a_yes_lost_in_crashes_is_told_once_urgently_and_listed_until_retried(inbox: Store) -> None:
    request_id, asker = ask(inbox)
    assert inbox.answer_approval(request_id, "yes", now=T + 1, via="cli") == "yes"
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    assert notices(inbox, answer.id) == [] and inbox.stranded_answers() == []
    died_at = lose_every_attempt(inbox, answer.id, T + 1)

    assert inbox.event(answer.id).status == "dead"  # type: ignore[union-attr]
    [(body, urgent)] = notices(inbox, answer.id)
    assert urgent
    assert body == (f"Your yes to {ACTION} (request {request_id}) was not run: the event that carries your answer, "
                    f"#{answer.id}, is dead (lost in 3 crashes). Nothing was done. `agent-console retry {answer.id}` "
                    "runs it, once.")
    [stranded] = inbox.stranded_answers()
    assert stranded == inbox.stranded_answer(answer.id)
    assert (stranded.request_id, stranded.outcome, stranded.action, stranded.tool, stranded.asked_by) == \
        (request_id, "yes", ACTION, "mcp__shop__refund", asker)
    assert (stranded.dead_reason, stranded.attempts, stranded.crashes, stranded.died_at, stranded.call) == \
        ("lost", 3, 3, died_at, "not_run")
    assert inbox.status(now=died_at)["stranded_answers"] == [stranded.public()]
    assert stranded.public()["in_words"] == stranded.in_words()

    # A later pass claims nothing and tells nothing again; a retry by hand takes it off the list.
    gen = inbox.acquire("later", now=died_at + TTL + 1)
    assert gen is not None and inbox.claim_batch("later", gen, now=died_at + TTL + 1) == []
    assert len(notices(inbox, answer.id)) == 1
    assert inbox.retry_dead(answer.id, now=died_at + TTL + 2)
    assert inbox.stranded_answers() == [] and inbox.stranded_answer(answer.id) is None


def test_a_no_and_an_expiry_are_told_without_urgency_and_say_nothing_was_run(inbox: Store) -> None:
    request_id, _ = ask(inbox)
    assert inbox.answer_approval(request_id, "no", now=T + 1, via="console") == "no"
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    lose_every_attempt(inbox, answer.id, T + 1)
    [(body, urgent)] = notices(inbox, answer.id)
    assert not urgent
    assert body.startswith(f"Your no to {ACTION} (request {request_id}) stands and nothing was run, but the "
                           "conversation that asked did not resume")
    assert body.endswith(f"`agent-console retry {answer.id}` resumes it; the call is not run.")
    [stranded] = inbox.stranded_answers()
    assert (stranded.outcome, stranded.call) == ("no", None)
    assert stranded.in_words() == (f"declined, nothing run, but the conversation did not resume: its event "
                                   f"#{answer.id} is dead (lost in 3 crashes) — retry #{answer.id} to resume it")


def test_an_expiry_whose_event_dies_says_so(inbox: Store) -> None:
    request_id, _ = ask(inbox)
    assert inbox.answer_approval(request_id, "yes", now=T + 3600, via="cli") == "expired"
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    lose_every_attempt(inbox, answer.id, T + 3600)
    [(body, urgent)] = notices(inbox, answer.id)
    assert not urgent and body.startswith(f"{ACTION} (request {request_id}) expired unanswered and nothing was run")
    assert "the event that carries the expiry" in body
    assert inbox.stranded_answers()[0].in_words().startswith("expired unanswered, nothing run, but the conversation")


def test_a_yes_to_a_plain_question_says_the_conversation_did_not_hear_it(inbox: Store) -> None:
    request_id, _ = ask(inbox, tool=None)
    inbox.answer_approval(request_id, "yes", now=T + 1, via="cli")
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    lose_every_attempt(inbox, answer.id, T + 1)
    [(body, urgent)] = notices(inbox, answer.id)
    assert urgent and body.startswith(f"Your yes to Refund order 881? (request {request_id}) did not reach the "
                                      "conversation that asked")
    assert inbox.stranded_answers()[0].call is None


def failing_runs(store: Store, answer_id: int, start: int, *, step: str | None = None) -> None:
    """Every attempt's run fails (after running the approved call's step, once, when step names it)."""
    for attempt in range(store.options.max_attempts):
        at = start + attempt
        gen = store.acquire("engine", now=at)
        assert gen is not None
        [event] = store.claim_batch("engine", gen, now=at)
        assert event.id == answer_id
        if step is not None:
            store.run_once(step, lambda: {"refunded": 42.5}, gen=gen, now=at, holder="engine", event_id=answer_id)
        assert store.finish("engine", gen, [answer_id], now=at, error="the model call failed: 500")


def test_a_yes_whose_call_ran_but_whose_report_failed_says_it_was_carried_out(inbox: Store) -> None:
    request_id, _ = ask(inbox)
    inbox.answer_approval(request_id, "yes", now=T + 1, via="cli")
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    failing_runs(inbox, answer.id, T + 2, step=approved_step_key(request_id))
    step = inbox.journal_step(approved_step_key(request_id))
    assert step is not None and (step.state, step.executions) == ("committed", 1)  # skipped on every later attempt
    [(body, urgent)] = notices(inbox, answer.id)
    assert urgent and body.startswith(f"Your yes to {ACTION} (request {request_id}) was carried out, but the "
                                      "conversation did not resume to report it")
    assert "(failed 3 attempts: the model call failed: 500)" in body and "the call is not run again" in body
    assert inbox.stranded_answers()[0].call == "done"


def test_a_yes_whose_worker_died_during_the_call_says_its_outcome_is_unknown(inbox: Store) -> None:
    request_id, _ = ask(inbox)
    inbox.answer_approval(request_id, "yes", now=T + 1, via="cli")
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    at = T + 2
    for attempt in range(inbox.options.max_attempts):
        at += TTL + 1
        gen = inbox.acquire(f"worker-{attempt}", now=at)
        assert gen is not None
        [event] = inbox.claim_batch(f"worker-{attempt}", gen, now=at)

        def call_then_lose_the_lease(later: int = at + TTL + 1) -> dict[str, float]:
            # The call happens; meanwhile its worker is taken over (frozen), so its commit is refused.
            assert inbox.acquire("taker", now=later) is not None
            return {"refunded": 42.5}

        with pytest.raises(StaleGeneration):
            inbox.run_once(approved_step_key(request_id), call_then_lose_the_lease, gen=gen, now=at,
                           holder=f"worker-{attempt}", event_id=event.id)
        at += TTL + 1
    gen = inbox.acquire("last", now=at + TTL + 1)
    assert gen is not None and inbox.claim_batch("last", gen, now=at + TTL + 1) == []
    step = inbox.journal_step(approved_step_key(request_id))
    assert step is not None and step.state == "claimed"
    [(body, urgent)] = notices(inbox, answer.id)
    assert urgent and "may not have been carried out" in body and "same idempotency key" in body
    [stranded] = inbox.stranded_answers()
    assert stranded.call == "unknown" and stranded.in_words().startswith("approved, but whether it ran is unknown")


def test_a_stale_generation_parks_nothing_and_tells_nothing(inbox: Store) -> None:
    request_id, _ = ask(inbox)
    inbox.answer_approval(request_id, "yes", now=T + 1, via="cli")
    answer = inbox.find_event("approval", request_id)
    assert answer is not None
    inbox.options = inbox.options.but(max_attempts=1)
    gen = inbox.acquire("frozen", now=T + 2)
    assert gen is not None
    inbox.claim_batch("frozen", gen, now=T + 2)
    assert inbox.acquire("new", now=T + 2 + TTL + 1) is not None  # the frozen worker's lease is taken over
    # Its failure on the last attempt would park the event dead: refused, so nothing is parked or told.
    assert not inbox.finish("frozen", gen, [answer.id], now=T + 2 + TTL + 2, error="boom")
    assert inbox.event(answer.id).status == "running"  # type: ignore[union-attr]
    assert notices(inbox, answer.id) == [] and inbox.stranded_answers() == []


def test_a_discarded_answer_is_off_the_list_and_other_dead_events_are_never_on_it(inbox: Store) -> None:
    request_id, _ = ask(inbox)
    inbox.answer_approval(request_id, "yes", now=T + 1, via="cli")
    inbox.ingest("chat", "poison", {"poison": True}, now=T + 1)
    answer = inbox.find_event("approval", request_id)
    other = inbox.find_event("chat", "poison")
    assert answer is not None and other is not None
    lose_every_attempt_of_both(inbox, T + 1)
    assert inbox.event(other.id).status == "dead"  # type: ignore[union-attr]
    assert notices(inbox, other.id) == []
    assert [s.event_id for s in inbox.stranded_answers()] == [answer.id]
    assert inbox.discard([answer.id], now=T + 10_000) == [answer.id]  # the owner gives up on it, knowingly
    assert inbox.stranded_answers() == []


def lose_every_attempt_of_both(store: Store, start: int) -> None:
    """Lost claims until both events are dead (a retry is claimed alone: one event a pass)."""
    at = start
    for attempt in range(2 * store.options.max_attempts + 1):
        at += TTL + 1
        gen = store.acquire(f"worker-{attempt}", now=at)
        assert gen is not None
        store.claim_batch(f"worker-{attempt}", gen, now=at)


def test_a_yes_whose_call_could_not_be_sent_waits_uncharged_until_the_approvals_deadline(inbox_target: str) -> None:
    """Issue 37 item 1: a run that could not send the approved call (its server unreachable) is not the
    answer's failure: the event gives its attempt back, waits the backoff (counted in the tries that could not
    send, at least 1 s, never past the approval's deadline) and is tried again, more often than max_attempts
    would allow; the first try at the deadline that still cannot send parks it dead (`unsent`), and the owner
    is told the call was not made and how to run it."""
    with Store.open(inbox_target, lease_ttl=TTL, max_attempts=2, backoff_base=10, backoff_jitter=0,
                    seed=7) as store:
        request_id, _asker = ask(store)  # the approval's deadline: T + 3600
        assert store.answer_approval(request_id, "yes", now=T + 1, via="cli") == "yes"
        answer = store.find_event("approval", request_id)
        assert answer is not None
        gen = store.acquire("w", now=T + 1)
        assert gen is not None
        at, waits = T + 1, []
        for _ in range(5):  # past max_attempts (2): a try that could not send costs no attempt
            (claimed,) = store.claim_batch("w", gen, now=at)
            assert claimed.id == answer.id and claimed.attempts <= 2
            assert store.finish_run("w", gen, [answer.id], RunOutcome(), now=at, error="not sent: down",
                                    blame=answer.id, not_sent=True)
            event = store.event(answer.id)
            assert event is not None
            assert (event.status, event.attempts, event.error) == ("pending", 1, "not sent: down")
            waits.append(event.next_attempt_at - at)
            at = event.next_attempt_at
            gen = store.acquire("w", now=at)
            assert gen is not None
        assert waits == [10, 20, 40, 80, 160]
        assert notices(store, answer.id) == []

        at = T + 3600  # the last try, at the deadline, still cannot send
        gen = store.acquire("w", now=at)
        assert gen is not None
        (claimed,) = store.claim_batch("w", gen, now=at)
        assert store.finish_run("w", gen, [answer.id], RunOutcome(), now=at, error="not sent: still down",
                                blame=answer.id, not_sent=True)
        event = store.event(answer.id)
        assert event is not None and (event.status, event.dead_reason) == ("dead", "unsent")
        [(body, urgent)] = notices(store, answer.id)
        assert urgent and body == (
            f"Your yes to {ACTION} (request {request_id}) was not carried out: the call was not made, because its "
            "tool's server could not be reached before the approval's deadline (not sent: still down). Nothing was "
            f"done. `agent-console retry {answer.id}` runs it, once.")
        (stranded,) = store.stranded_answers()
        assert stranded.call == "not_run" and "could not be sent before the approval's deadline" in stranded.in_words()
        assert [a.kind for a in store.history(answer.id)].count("unsent") == 6
