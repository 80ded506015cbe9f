"""The eight scenarios of seed article 000, each reproducing the outcome its driver printed.

The seed's driver runs them one after another on one file with a simulated clock; here each scenario
builds the state it needs on its own file, with the same times (t = 1_000_000, a 120 s lease, a one-hour
outbox gap). backoff_base=0 because the seed has no backoff between attempts; the tests in
test_claiming.py cover the backoff.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from console.core import Batch, Event, Store

T = 1_000_000
TTL = 120
DAY = 86_400
HOUR = 3_600


@pytest.fixture(params=[0, 10], ids=["no-backoff", "default-backoff"])
def seed_store(inbox_target: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    """The seed's settings; every scenario also runs with the product's default backoff (10 s doubling),
    which must not change what the seed prints: a lost event's backoff counts from its lost claim."""
    store = Store.open(inbox_target, lease_ttl=TTL, max_attempts=3, outbox_gap=HOUR,
                       backoff_base=request.param)
    try:
        yield store
    finally:
        store.close()


def run(store: Store, holder: str, now: int, messages: tuple[str, ...] = ()) -> list[Event]:
    """One run as the seed's driver does it: take the lease, claim, finish."""
    gen = store.acquire(holder, now=now)
    assert gen is not None
    batch = store.claim_batch(holder, gen, now=now)
    assert store.finish(holder, gen, [e.id for e in batch], now=now, messages=messages)
    return batch


def state(store: Store, source_id: str) -> tuple[str, int]:
    event = store.find_event("chat", source_id)
    assert event is not None
    return event.status, event.attempts


def test_1_webhook_delivered_twice_is_stored_once(seed_store: Store) -> None:
    first = seed_store.ingest("github", "delivery-7f3a", {"pr": 12}, now=T)
    retry = seed_store.ingest("github", "delivery-7f3a", {"pr": 12}, now=T + 1)
    rows = sum(seed_store.counts().values())
    assert (first, retry, rows) == (True, False, 1)
    assert len(seed_store.events()) == 1


def test_2_two_workers_ask_for_the_lease_at_the_same_time(seed_store: Store) -> None:
    a = seed_store.acquire("A", now=T)
    b = seed_store.acquire("B", now=T)
    assert (a, b) == (1, None)


def test_3_three_quick_chat_messages_make_one_run(seed_store: Store) -> None:
    seed_store.acquire("A", now=T)
    for n in range(3):
        seed_store.ingest("chat", f"msg-{n}", {"text": f"message {n}"}, now=T + 1)
    batch = run(seed_store, "A", T + 5)
    assert [e.source_id for e in batch] == ["msg-0", "msg-1", "msg-2"]
    assert seed_store.counts()["done"] == 3


def test_4_a_stalled_worker_is_fenced_off(seed_store: Store) -> None:
    store = seed_store
    run(store, "A", T)
    store.ingest("chat", "msg-3", {"text": "send the report"}, now=T + 10)
    gen_a = store.acquire("A", now=T + 10)
    batch_a = store.claim_batch("A", gen_a or 0, now=T + 10)  # A stalls here
    assert gen_a == 1
    assert [e.source_id for e in batch_a] == ["msg-3"]

    assert store.acquire("B", now=T + 60) is None  # before A's lease expires

    t2 = T + 10 + TTL + 1
    gen_b = store.acquire("B", now=t2)
    batch_b = store.claim_batch("B", gen_b or 0, now=t2)
    assert gen_b == 2
    assert [e.source_id for e in batch_b] == ["msg-3"]
    assert store.finish("B", 2, [e.id for e in batch_b], now=t2, messages=["report sent"])

    t3 = t2 + TTL + 1  # B's lease lapses too
    assert store.acquire("A", now=t3) == 3
    assert store.finish("A", 1, [e.id for e in batch_a], now=t3, messages=["report sent"]) is False

    assert state(store, "msg-3") == ("done", 2)
    assert [m.body for m in store.outbox_messages()] == ["report sent"]
    refused = store.refused_finishes()
    assert len(refused) == 1
    assert (refused[0].holder, refused[0].gen, refused[0].event_ids) == ("A", 1, [batch_a[0].id])
    assert (refused[0].lease_holder, refused[0].lease_gen, refused[0].at) == ("A", 3, t3)
    assert store.status(now=t3)["refused_finishes"] == 1


def test_5_a_poison_event_does_not_take_the_healthy_one_down(seed_store: Store) -> None:
    store = seed_store
    store.ingest("chat", "poison", {"text": "x"}, now=T)
    store.ingest("chat", "healthy", {"text": "ok"}, now=T)
    now = T
    log = []
    for n in range(5):
        holder = f"W{n}"
        gen = store.acquire(holder, now=now)
        assert gen == n + 1  # every worker takes over from a crashed (or idle) predecessor
        got = store.claim_batch(holder, gen, now=now)
        ids = [e.source_id for e in got]
        if "poison" in ids:
            log.append((holder, ids, "crashed"))  # no finish()
        else:
            assert store.finish(holder, gen, [e.id for e in got], now=now)
            log.append((holder, ids, "finished"))
        now += TTL + 1
    assert log == [
        ("W0", ["poison", "healthy"], "crashed"),
        ("W1", ["poison"], "crashed"),
        ("W2", ["poison"], "crashed"),
        ("W3", ["healthy"], "finished"),
        ("W4", [], "finished"),
    ]
    assert state(store, "poison") == ("dead", 3)
    assert state(store, "healthy") == ("done", 2)
    poison = store.find_event("chat", "poison")
    assert poison is not None and poison.dead_reason == "lost"  # its last worker died with it, out of attempts
    assert "out of attempts" in (poison.death_in_words() or "")


def test_5b_with_real_backoff_a_takeover_retries_oldest_first_and_the_healthy_event_still_finishes(
    inbox_target: str,
) -> None:
    """With backoff counted from each lost claim (issue 8.5), every event a crashed worker held is due again
    when its lease lapses, so the replacement retries them oldest first, as the seed does: the healthy
    event waits behind the poison event's crashes (at most max_attempts - 1 of them), then finishes on its
    second attempt while the poison event is parked dead."""
    store = Store.open(inbox_target, lease_ttl=TTL, max_attempts=3, backoff_base=10, seed=3)
    store.ingest("chat", "poison", {"text": "x"}, now=T)
    store.ingest("chat", "healthy", {"text": "ok"}, now=T)
    now, worker, crashed = T, 0, True
    runs: list[list[str]] = []
    while state(store, "healthy")[0] != "done":
        assert len(runs) < 10, f"the healthy event never finished: {runs}"
        if crashed:
            worker += 1
        holder = f"W{worker}"
        gen = store.acquire(holder, now=now)
        assert gen is not None
        got = store.claim_batch(holder, gen, now=now)
        runs.append([e.source_id for e in got])
        lease = store.lease()
        assert lease is not None
        if "poison" in runs[-1]:
            crashed, now = True, lease.until + 1  # the next worker takes over once the lease lapses
            continue
        crashed = False
        assert store.finish(holder, gen, [e.id for e in got], now=now)
        # The worker sleeps until the earliest retry is due, as the runtime's worker does.
        now = max(now + 1, min((e.next_attempt_at for e in store.events(status="pending")), default=now + 1))
    assert runs == [["poison", "healthy"], ["poison"], ["poison"], ["healthy"]]
    assert state(store, "healthy") == ("done", 2)
    assert state(store, "poison") == ("dead", 3)
    store.close()


def test_6_timers_second_pass_replay_and_a_three_day_outage(seed_store: Store) -> None:
    store = seed_store
    now = T
    store.add_timer("digest", now, {"task": "daily digest"}, every=DAY)
    assert (store.run_scheduler(now=now), store.run_scheduler(now=now)) == (1, 0)

    store.add_timer("digest", now, {"task": "daily digest"}, every=DAY)  # a deploy replays the schedule
    assert store.run_scheduler(now=now) == 1
    assert len(store.events(source="timer")) == 1

    later = now + DAY + 3 * DAY + 600  # next due, plus three days, plus ten minutes
    store.run_scheduler(now=later)
    events = store.events(source="timer")
    latest = events[0].payload
    timer = store.timer("digest")
    assert timer is not None
    assert len(events) == 2
    assert latest["skipped"] == 3
    assert latest["late_by"] // 60 == 10
    assert latest["task"] == "daily digest"
    assert round((timer.due - later) / HOUR, 1) == 23.8


def test_7_approvals_with_a_four_hour_window(seed_store: Store) -> None:
    store = seed_store
    later = T
    h = HOUR
    store.request_approval("refund-881", "refund order 881", now=later, expires_in=4 * h)
    store.run_scheduler(now=later + 5 * h)
    assert store.answer_approval("refund-881", "yes", now=later + 6 * h) == "expired"

    store.request_approval("refund-882", "refund order 882", now=later, expires_in=4 * h)
    assert store.answer_approval("refund-882", "yes", now=later + 5 * h) == "expired"  # scheduler not run yet

    store.request_approval("refund-883", "refund order 883", now=later, expires_in=4 * h)
    assert store.answer_approval("refund-883", "yes", now=later + h) == "yes"
    assert store.answer_approval("refund-883", "no", now=later + 2 * h) == "yes"
    store.run_scheduler(now=later + 5 * h)
    stored = store.find_event("approval", "refund-883")
    assert stored is not None and stored.payload["answer"] == "yes"
    approval = store.approval("refund-883")
    assert approval is not None and approval.outcome == "yes"

    assert store.answer_approval("refund-999", "yes", now=later) == "unknown"
    assert len(store.events(source="approval")) == 3  # one outcome per request, never two


def test_8_outbox_three_updates_inside_an_hour(seed_store: Store) -> None:
    store = seed_store
    sent: list[Batch] = []
    m = T + 6 * HOUR
    store.queue_message("earlier news", now=m - 2 * HOUR)
    assert store.dispatch(sent.append, now=m - 2 * HOUR) == 1  # the last send was two hours ago
    sent.clear()
    for n, minute in enumerate((0, 10, 20)):
        store.queue_message(f"update {n}", now=m + minute * 60)
        store.dispatch(sent.append, now=m + minute * 60)
    store.dispatch(sent.append, now=m + 61 * 60)
    assert [" | ".join(batch.bodies) for batch in sent] == ["update 0", "update 1 | update 2"]
    assert len({batch.key for batch in sent}) == 2
