"""Batch-mates (issue 21.6): a run that failed because of one event its agent named (a poison event) charges
that event alone. Its batch-mates keep their attempt and their own (empty) error, say why they are pending
again, and each runs alone next. Runs on both backends."""

from __future__ import annotations

from console.core import Event, Store

T = 1_000_000
ERROR = "PoisonEventError: event is marked as poison"


def claim(store: Store, holder: str, now: int) -> tuple[int, list[Event]]:
    gen = store.acquire(holder, now=now)
    assert gen is not None
    return gen, store.claim_batch(holder, gen, now=now)


def fail_batch_on_poison(store: Store) -> tuple[int, Event, Event, Event]:
    """a, poison, c claimed as one batch; the run fails and names the poison event."""
    store.ingest_many([("chat", "a", {}), ("hook", "poison", {"poison": True}), ("chat", "c", {})], now=T)
    gen, batch = claim(store, "A", T)
    a, poison, c = batch
    assert [e.attempts for e in batch] == [1, 1, 1]
    assert store.finish("A", gen, [a.id, poison.id, c.id], now=T, error=ERROR, blame=poison.id)
    return gen, a, poison, c


def test_only_the_named_poison_event_spends_an_attempt_and_carries_the_error(store: Store) -> None:
    _, a, poison, c = fail_batch_on_poison(store)
    charged = store.event(poison.id)
    assert charged is not None
    assert (charged.status, charged.attempts, charged.error) == ("pending", 1, ERROR)
    assert charged.next_attempt_at > T and charged.failed_with is None
    for mate in (store.event(a.id), store.event(c.id)):
        assert mate is not None
        assert (mate.status, mate.attempts, mate.error, mate.failed_with) == ("pending", 0, None, poison.id)
        assert mate.batch_failure_in_words() == f"failed with its batch (#{poison.id}, poison); runs alone next"
        last = store.history(mate.id)[-1]
        assert (last.kind, last.holder) == ("batch", "A")
        assert last.detail == (f"failed with its batch (#{poison.id}, poison): {ERROR}; "
                               "attempt not counted, runs alone next")
    assert [entry.kind for entry in store.history(poison.id)] == ["claim", "error"]
    assert store.counts()["pending"] == 3


def test_each_batch_mate_runs_alone_next_and_the_poison_waits_out_its_backoff(store: Store) -> None:
    gen, a, poison, c = fail_batch_on_poison(store)
    store.ingest("chat", "later", {}, now=T + 1)  # a fresh event does not take a batch-mate along
    alone = [store.claim_batch("A", gen, now=T + 1) for _ in range(2)]
    assert [[(e.id, e.attempts) for e in batch] for batch in alone] == [[(a.id, 1)], [(c.id, 1)]]
    claimed = store.event(a.id)
    assert claimed is not None and claimed.failed_with is None  # running alone now: nothing to explain
    assert claimed.batch_failure_in_words() is None
    for batch in alone:
        assert store.finish("A", gen, [batch[0].id], now=T + 1)
    assert [e.source_id for e in store.claim_batch("A", gen, now=T + 1)] == ["later"]
    charged = store.event(poison.id)
    assert charged is not None
    assert [(e.id, e.attempts) for e in store.claim_batch("A", gen, now=charged.next_attempt_at)] == [(poison.id, 2)]


def test_a_batch_mate_failing_alone_spends_its_own_attempt(store: Store) -> None:
    gen, a, _, _ = fail_batch_on_poison(store)
    [mate] = store.claim_batch("A", gen, now=T + 1)
    assert mate.id == a.id
    assert store.finish("A", gen, [a.id], now=T + 1, error="its own trouble", blame=a.id)
    failed = store.event(a.id)
    assert failed is not None
    assert (failed.status, failed.attempts, failed.error) == ("pending", 1, "its own trouble")
    assert failed.batch_failure_in_words() is None


def test_a_batch_mate_handed_back_while_running_alone_stays_alone(store: Store) -> None:
    gen, a, _, _ = fail_batch_on_poison(store)
    [mate] = store.claim_batch("A", gen, now=T + 1)
    assert store.unclaim("A", gen, [mate.id], now=T + 1, reason="did not fit one model call")
    again = store.claim_batch("A", gen, now=T + 2)
    assert [(e.id, e.attempts) for e in again] == [(a.id, 1)]


def test_a_stale_generation_cannot_blame_anyone(store: Store) -> None:
    store.ingest_many([("chat", "a", {}), ("hook", "poison", {"poison": True})], now=T)
    gen, (a, poison) = claim(store, "A", T)
    assert store.acquire("B", now=T + 121) == gen + 1  # A's lease lapsed; B took over
    assert not store.finish("A", gen, [a.id, poison.id], now=T + 121, error=ERROR, blame=poison.id)
    for event in (store.event(a.id), store.event(poison.id)):
        assert event is not None
        assert (event.status, event.attempts, event.failed_with) == ("running", 1, None)


def test_a_failure_naming_no_event_of_the_batch_charges_them_all(store: Store) -> None:
    """Without a culprit among them the run's failure is every event's (the seed rule): each is charged and
    retried alone after its backoff."""
    store.ingest_many([("chat", "a", {}), ("chat", "b", {})], now=T)
    gen, batch = claim(store, "A", T)
    assert store.finish("A", gen, [e.id for e in batch], now=T, error="model down", blame=10_000)
    for event in batch:
        again = store.event(event.id)
        assert again is not None
        assert (again.attempts, again.error, again.failed_with) == (1, "model down", None)
