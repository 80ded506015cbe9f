"""Claiming and finishing under the lease: attempts, backoff, dead events, batch cap, history, status."""

from __future__ import annotations

import re

import pytest

from console.core import Event, OutboxDraft, Store

T = 1_000_000


def claim(store: Store, holder: str, now: int) -> tuple[int, list[Event]]:
    gen = store.acquire(holder, now=now)
    assert gen is not None
    return gen, store.claim_batch(holder, gen, now=now)


def test_claim_statements_use_their_partial_indexes_and_never_scan_the_inbox(sqlite_store: Store) -> None:
    store = sqlite_store  # SQLite's planner; PostgreSQL's plans: tests/core/test_postgres.py
    store.ingest_many([("chat", f"m-{n}", {}) for n in range(2_000)], now=T)
    store.connection.execute("ANALYZE")  # plans must hold with statistics too, not only on an empty file
    plans = store.explain_claim()
    assert set(plans) == {"lost", "due_retry", "hand_retry", "claim_one", "claim_fresh"}
    for name, lines in plans.items():
        touching_inbox = [line for line in lines if re.search(r"\binbox\b", line)]
        assert touching_inbox, (name, lines)
        for line in touching_inbox:
            assert re.fullmatch(
                r"SEARCH inbox USING .*|SCAN inbox USING (COVERING )?INDEX (inbox_fresh|inbox_alone)", line), (
                name, line)
    assert any("inbox_retry" in line for line in plans["due_retry"])
    assert any("inbox_alone" in line for line in plans["hand_retry"])
    assert any("inbox_running" in line for line in plans["lost"])
    assert any("inbox_fresh" in line for line in plans["claim_fresh"])
    assert plans["claim_one"] == ["SEARCH inbox USING INTEGER PRIMARY KEY (rowid=?)"]


def test_only_the_lease_holder_of_the_current_generation_can_claim(store: Store) -> None:
    store.ingest("chat", "m-1", {}, now=T)
    assert store.claim_batch("nobody", 1, now=T) == []  # no lease at all
    gen = store.acquire("A", now=T)
    assert gen == 1
    assert store.claim_batch("B", 1, now=T) == []  # not the holder
    assert store.claim_batch("A", 2, now=T) == []  # a generation that does not exist yet
    assert store.claim_batch("A", 1, now=T + 121) == []  # lease expired
    assert store.counts()["pending"] == 1
    assert [e.source_id for e in store.claim_batch("A", 1, now=T + 1)] == ["m-1"]


def test_a_batch_is_capped_and_the_rest_waits_for_the_next_claim(inbox_target: str) -> None:
    with Store.open(inbox_target, batch_cap=4) as store:
        store.ingest_many([("chat", f"m-{n}", {"n": n}) for n in range(10)], now=T)
        sizes = []
        gen = store.acquire("A", now=T)
        assert gen is not None
        while batch := store.claim_batch("A", gen, now=T):
            sizes.append([e.payload["n"] for e in batch])
            assert store.finish("A", gen, [e.id for e in batch], now=T)
        assert sizes == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_failed_run_backs_off_with_jitter_and_is_not_claimable_early(inbox_target: str) -> None:
    base, jitter = 10, 0.2
    with Store.open(inbox_target, backoff_base=base, backoff_jitter=jitter, max_attempts=5,
                    seed=11) as store:
        store.ingest("chat", "flaky", {}, now=T)
        now = T
        delays = []
        for attempt in range(1, 5):
            gen, batch = claim(store, "A", now)
            assert [e.attempts for e in batch] == [attempt]
            assert store.finish("A", gen, [batch[0].id], now=now, error=f"model timeout {attempt}")
            event = store.find_event("chat", "flaky")
            assert event is not None and event.status == "pending" and event.error == f"model timeout {attempt}"
            delay = event.next_attempt_at - now
            nominal = base * 2 ** (attempt - 1)
            assert nominal * (1 - jitter) - 1 <= delay <= nominal * (1 + jitter) + 1, (attempt, delay)
            delays.append(delay)
            assert store.claim_batch("A", gen, now=event.next_attempt_at - 1) == []  # not before its time
            now = event.next_attempt_at
        assert delays == sorted(delays)
        gen, batch = claim(store, "A", now)
        store.finish("A", gen, [batch[0].id], now=now, error="model timeout 5")
        event = store.find_event("chat", "flaky")
        assert event is not None and (event.status, event.attempts) == ("dead", 5)
        # why it died is a field; error is the last error itself, and the sentence is built from both
        assert (event.dead_reason, event.error) == ("failed", "model timeout 5")
        assert event.death_in_words() == "failed 5 attempts; last error: model timeout 5"


def test_jitter_spreads_retries_and_the_backoff_is_capped(inbox_target: str) -> None:
    with Store.open(inbox_target, backoff_base=60, backoff_max=300, backoff_jitter=0.2,
                    max_attempts=20, lease_ttl=100_000, seed=5) as store:
        store.ingest_many([("chat", f"m-{n}", {}) for n in range(30)], now=T)
        gen, batch = claim(store, "A", T)
        store.finish("A", gen, [e.id for e in batch], now=T, error="down")
        first_delays = {e.next_attempt_at - T for e in store.events(limit=30)}
        assert len(first_delays) > 5  # not all at the same second: no thundering herd
        assert all(48 <= d <= 72 for d in first_delays)
        now = T + 72
        for _ in range(29):  # the others succeed on their retry; one keeps failing
            retried = store.claim_batch("A", gen, now=now)
            assert len(retried) == 1, "a retry is claimed alone"
            store.finish("A", gen, [retried[0].id], now=now)
        event = store.events(status="pending")[0]
        now = event.next_attempt_at
        for _ in range(8):  # the same event, failing again and again
            retried = store.claim_batch("A", gen, now=now)
            assert [e.id for e in retried] == [event.id], "a retry is claimed alone"
            store.finish("A", gen, [event.id], now=now, error="down")
            again = store.event(event.id)
            assert again is not None
            assert again.next_attempt_at - now <= 300 * 1.2 + 1
            now = again.next_attempt_at
            store.renew("A", gen, now=now) or pytest.fail("lease lapsed")


def test_a_takeover_after_a_lapsed_lease_reclaims_the_lost_events_at_once(store: Store) -> None:
    """The seed's scenario 4 with the default backoff (issue 8.5): the backoff of a lost event counts from its
    lost claim, so the worker that takes over once the lease lapsed runs the orphaned event at once."""
    store.ingest_many([("chat", "a", {}), ("chat", "b", {})], now=T)
    _, batch = claim(store, "A", T)
    assert [e.status for e in batch] == ["running", "running"]
    gen_b, got = claim(store, "B", T + 121)  # A crashed; B takes over
    assert gen_b == 2 and [(e.source_id, e.attempts) for e in got] == [("a", 2)]  # a retry, claimed alone
    other = store.find_event("chat", "b")
    assert other is not None and (other.status, other.attempts) == ("pending", 1)
    assert other.error == "worker of generation 1 lost its lease mid-run"
    assert other.next_attempt_at <= T + 121  # due at once: its backoff ran while the lease was lapsing
    store.finish("B", gen_b, [got[0].id], now=T + 121)
    assert [e.source_id for e in store.claim_batch("B", gen_b, now=T + 121)] == ["b"]


def test_a_crash_loop_still_backs_off_from_its_last_claim(inbox_target: str) -> None:
    """A backoff longer than the lease still holds after a takeover: the lost event is due backoff seconds
    after the claim that crashed, not at once and not backoff seconds after the takeover."""
    with Store.open(inbox_target, lease_ttl=120, backoff_base=600, backoff_jitter=0) as store:
        store.ingest("chat", "a", {}, now=T)
        claim(store, "A", T)
        gen_b, got = claim(store, "B", T + 121)
        assert got == []
        event = store.find_event("chat", "a")
        assert event is not None and (event.status, event.next_attempt_at) == ("pending", T + 600)
        assert store.claim_batch("B", gen_b, now=T + 200) == []
        assert [e.source_id for e in claim(store, "B", T + 600)[1]] == ["a"]


def test_release_hands_running_events_back_at_once(store: Store) -> None:
    store.ingest("chat", "a", {}, now=T)
    gen, batch = claim(store, "A", T)
    assert [e.status for e in batch] == ["running"]
    assert store.release("A", gen, now=T + 5) is True
    lease = store.lease()
    assert lease is not None and not lease.is_live(T + 5)
    gen_b, got = claim(store, "B", T + 5)  # no need to wait for the TTL
    assert gen_b == 2 and [(e.source_id, e.attempts) for e in got] == [("a", 2)]
    assert store.release("B", 1) is False  # a stale generation cannot release


def test_an_event_released_mid_run_until_out_of_attempts_dies_saying_why(store: Store) -> None:
    """Found by the inbox state machine (test_properties): three claims each ended by a release left a pending
    event with three attempts and no error, which the next claim parked dead with nothing to say."""
    store.ingest("chat", "a", {}, now=T)
    now = T
    for holder in "ABC":
        gen, batch = claim(store, holder, now)
        assert [e.source_id for e in batch] == ["a"]
        assert store.release(holder, gen, now=now)
        now += 100  # past any backoff
    assert claim(store, "D", now)[1] == []
    [event] = store.events()
    assert (event.status, event.dead_reason, event.attempts) == ("dead", "out_of_attempts", 3)
    assert event.error == "worker of generation 3 released the lease mid-run"


def test_every_step_of_an_event_is_in_its_history(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=2, backoff_base=0) as store:
        store.ingest("chat", "m", {}, now=T)
        event_id = store.events()[0].id
        gen, _ = claim(store, "A", T)  # claim 1
        store.finish("A", gen, [event_id], now=T + 1, error="tool failed")  # error
        gen_b = store.acquire("B", now=T + 200)
        assert gen_b == 2
        store.claim_batch("B", 2, now=T + 200)  # claim 2, then B stalls
        assert store.finish("A", 1, [event_id], now=T + 201) is False  # A is fenced off: refused
        gen_c, _ = claim(store, "C", T + 400)  # B's claim is lost; out of attempts: dead
        assert store.retry_dead(event_id, now=T + 500) is True  # retry by hand
        _, again = claim(store, "C", T + 500)  # claim 3
        assert [(e.id, e.attempts) for e in again] == [(event_id, 1)]
        assert store.finish("C", gen_c, [event_id], now=T + 501)  # finish
        kinds = [(a.kind, a.holder, a.gen) for a in store.history(event_id)]
        assert kinds == [
            ("claim", "A", 1), ("error", "A", 1), ("claim", "B", 2), ("refused", "A", 1), ("lost", "C", 2),
            ("dead", "C", 3), ("retry", None, None), ("claim", "C", 3), ("finish", "C", 3),
        ]
        assert [a.at for a in store.history(event_id)] == sorted(a.at for a in store.history(event_id))
        details = {a.kind: a.detail for a in store.history(event_id)}
        assert details["error"] == "tool failed"
        assert details["retry"] is not None and "out of attempts" in details["retry"]


def test_retry_dead_gives_a_fresh_budget(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=2, backoff_base=0) as store:
        store.ingest("chat", "poison", {}, now=T)
        now = T
        gen, _ = claim(store, "A", now)
        while store.counts()["dead"] == 0:
            assert now < T + 10, "never died"
            store.finish("A", gen, [store.events()[0].id], now=now, error="crash")
            now += 1
            store.claim_batch("A", gen, now=now)
        event = store.events()[0]
        assert (event.status, event.attempts) == ("dead", 2)
        assert store.retry_dead(event.id, now=now) is True
        assert store.retry_dead(event.id, now=now) is False  # not dead any more
        assert store.retry_dead(999, now=now) is False
        revived = store.event(event.id)
        assert revived is not None and (revived.status, revived.attempts) == ("pending", 0)
        for attempt in (1, 2):  # the full budget again
            got = store.claim_batch("A", gen, now=now)
            assert [e.attempts for e in got] == [attempt]
            store.finish("A", gen, [event.id], now=now, error="crash")
            now += 1
        store.claim_batch("A", gen, now=now)
        assert store.counts()["dead"] == 1


def test_retry_dead_matching_revives_one_source_or_all(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=1, backoff_base=0) as store:
        store.ingest_many([("github", "g1", {}), ("github", "g2", {}), ("stripe", "s1", {}), ("chat", "ok", {})],
                          now=T)
        gen, batch = claim(store, "A", T)
        failing = [e.id for e in batch if e.source != "chat"]
        store.finish("A", gen, failing, now=T, error="bad gateway")
        store.finish("A", gen, [e.id for e in batch if e.source == "chat"], now=T)
        assert store.count_dead() == 3 and store.count_dead(source="github") == 2
        assert store.retry_dead_matching(source="github", now=T + 1) == 2
        assert store.count_dead() == 1 and store.count_dead(source="github") == 0
        assert store.retry_dead_matching(now=T + 2) == 1
        assert store.retry_dead_matching(now=T + 3) == 0
        assert store.counts() == {"pending": 3, "running": 0, "done": 1, "dead": 0, "discarded": 0}


def test_a_duplicate_is_counted_in_the_ledger(store: Store) -> None:
    assert store.ingest("github", "d-1", {"v": 1}, now=T) is True
    for n in range(3):
        assert store.ingest("github", "d-1", {"v": 2 + n}, now=T + n) is False
    assert store.ingest_many([("github", "d-1", {}), ("github", "d-2", {}), ("github", "d-2", {})],
                             now=T + 9) == [False, True, False]
    first = store.find_event("github", "d-1")
    second = store.find_event("github", "d-2")
    assert first is not None and (first.duplicates, first.payload) == (4, {"v": 1})
    assert second is not None and second.duplicates == 1
    assert store.ingest_many([], now=T) == []


def test_messages_enter_the_outbox_only_with_a_successful_finish(store: Store) -> None:
    store.ingest_many([("chat", "a", {}), ("chat", "b", {})], now=T)
    gen, batch = claim(store, "A", T)
    a, b = batch
    assert store.finish("A", gen, [a.id], now=T, messages=["oops"], error="failed")
    assert store.outbox_messages() == []
    assert store.finish("A", gen, [b.id], now=T, messages=["answer", OutboxDraft("urgent answer", urgent=True)])
    messages = store.outbox_messages()
    assert [(m.body, m.urgent, m.event_id) for m in reversed(messages)] == [
        ("answer", False, b.id), ("urgent answer", True, b.id)]
    assert store.finish("A", gen, [b.id], now=T + 1, messages=["again"])  # b is done already
    assert len(store.outbox_messages()) == 2  # a finish that moved nothing queues nothing


def test_events_pages_newest_first(store: Store) -> None:
    store.ingest_many([("github" if n % 2 else "chat", f"e-{n}", {"n": n}) for n in range(10)], now=T)
    page = store.events(limit=3)
    assert [e.payload["n"] for e in page] == [9, 8, 7]
    older = store.events(limit=3, before_id=page[-1].id)
    assert [e.payload["n"] for e in older] == [6, 5, 4]
    newer = store.events(limit=2, after_id=older[0].id)
    assert [e.payload["n"] for e in newer] == [8, 7]
    assert [e.payload["n"] for e in store.events(source="github", limit=2)] == [9, 7]
    assert [e.payload["n"] for e in store.events(status="pending", limit=1)] == [9]
    assert store.sources() == ["chat", "github"]
    assert store.max_event_id() == page[0].id
    with pytest.raises(ValueError, match="unknown status"):
        store.events(status="finished")


def test_status_describes_the_inbox_at_a_glance(inbox_target: str) -> None:
    with Store.open(inbox_target, outbox_gap=3600) as store:
        assert store.status(now=T)["lease"] is None
        store.ingest_many([("chat", "a", {}), ("chat", "b", {})], now=T)
        gen, batch = claim(store, "A", T)
        store.finish("A", gen, [batch[0].id], now=T, messages=["hello"])
        store.finish("A", 1, [batch[1].id], now=T + 500)  # too late: refused
        store.acquire("B", now=T + 500)
        store.request_approval("refund-1", "refund order 1", now=T + 500, expires_in=600)
        store.add_timer("digest", T + 900, {"task": "digest"})
        status = store.status(now=T + 510)
        assert status["path"] == store.path == inbox_target
        assert status["events"] == {"pending": 0, "running": 1, "done": 1, "dead": 0, "discarded": 0}
        assert status["lease"] == {"holder": "B", "gen": 2, "until": T + 620, "expires_in": 110, "live": True}
        assert (status["takeovers"], status["refused_finishes"]) == (1, 1)
        assert status["approvals_pending"] == [
            {"request_id": "refund-1", "action": "refund order 1", "expires_at": T + 1100, "expires_in": 590,
             "event_id": None, "tool": None, "arguments": None, "sources": [], "details": {}, "origin": None}]
        assert status["outbox"]["queued"] == 1
        assert status["next_send_at"] == T + 510  # nothing sent yet: the first message may go at once
        assert status["next_timer"] == {"id": "digest", "due": T + 900, "due_in": 390}


def test_an_event_retried_by_hand_is_claimed_alone(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=1, backoff_base=0) as store:
        store.ingest("hook", "poison", {}, now=T)
        gen, batch = claim(store, "A", T)
        store.finish("A", gen, [e.id for e in batch], now=T, error="crash")
        poison = store.find_event("hook", "poison")
        assert poison is not None and poison.status == "dead"
        store.ingest_many([("chat", "a", {}), ("chat", "b", {})], now=T + 1)
        assert store.retry_dead(poison.id, now=T + 1)
        alone = store.claim_batch("A", gen, now=T + 2)
        assert [(e.source_id, e.attempts) for e in alone] == [("poison", 1)]
        store.finish("A", gen, [poison.id], now=T + 2)
        assert [e.source_id for e in store.claim_batch("A", gen, now=T + 3)] == ["a", "b"]


def test_outbox_counts_follow_every_change(store: Store) -> None:
    for n in range(3):
        store.queue_message(f"m{n}", now=T)
    assert store.outbox_counts()["queued"] == 3
    assert store.dispatch(lambda batch: None, now=T) == 3
    counts = store.outbox_counts()
    assert (counts["queued"], counts["sent"]) == (0, 3)
