"""Why hasn't this event run? One structured answer (kinds with their facts, and sentences) for the console's
detail and `agent-console show`, read from a real inbox file on a fixed clock."""

from __future__ import annotations

from console.core import Store
from console.runtime.why import AHEAD_LIMIT, REASON_KINDS, why_not_run

T = 1_790_000_000


def test_a_fresh_event_with_nobody_working_waits_for_a_worker_behind_older_ones(store: Store) -> None:
    store.ingest_many([("chat", f"m{n}", {}) for n in range(3)], now=T)
    newest = store.events(limit=1)[0]
    why = why_not_run(store, newest, now=T + 5)
    assert why.title == "Why hasn't this run?"
    assert why.kinds() == ["no_lease", "behind_older"]
    assert why.reasons[1].facts == {"ahead": 2, "at_least": False}
    assert why.sentences[1] == "2 older pending events ahead of it (batches of 100)"
    oldest = store.events(limit=3)[-1]
    gen = store.acquire("me", now=T)
    assert gen is not None
    assert why_not_run(store, oldest, now=T + 5, holder="me", mode="active").kinds() == ["next_pass"]
    assert why_not_run(store, oldest, now=T + 5, holder="me", mode="stalled").kinds() == ["stalled"]
    stalled = why_not_run(store, oldest, now=T + 5, holder="me", mode="stalled", resume_key="X")
    assert stalled.sentences == ["this console's worker is stalled (press X to resume it)"]  # the key as bound
    elsewhere = why_not_run(store, oldest, now=T + 5, holder="you", mode="stalled", resume_key="x")
    assert elsewhere.sentences[0].endswith("; this console is stalled (press x to resume it)")
    lapsed = why_not_run(store, oldest, now=T + 10_000, holder="me", mode="active")
    assert lapsed.kinds() == ["no_lease"] and lapsed.reasons[0].facts == {"lapsed_at": T + 120}


def test_the_count_ahead_stops_at_its_limit(store: Store) -> None:
    store.ingest_many([("chat", f"m{n}", {}) for n in range(AHEAD_LIMIT + 5)], now=T)
    why = why_not_run(store, store.events(limit=1)[0], now=T)
    assert why.reasons[-1].facts == {"ahead": AHEAD_LIMIT, "at_least": True}
    assert why.sentences[-1].startswith(f"{AHEAD_LIMIT}+ older pending events")


def test_a_running_event_and_its_held_replies(store: Store) -> None:
    store.ingest("chat", "m", {}, now=T)
    gen = store.acquire("w", now=T)
    assert gen is not None
    [event] = store.claim_batch("w", gen, now=T)
    running = why_not_run(store, event, now=T, holder="w", mode="active")
    assert running.title == "State" and running.kinds() == ["running"]
    assert running.reasons[0].facts == {"gen": 1, "attempt": 1}
    store.queue_message("an update", now=T)  # sent at once: the send gap starts now
    store.dispatch(lambda batch: None, now=T)
    assert store.finish("w", gen, [event.id], now=T + 1, messages=["one", "two"])
    done = why_not_run(store, store.event(event.id), now=T + 2)  # type: ignore[arg-type]
    assert done.kinds() == ["reply_held"]
    assert done.reasons[0].facts == {"held": 2, "next_send_at": T + 3600}
    assert done.sentences[0].startswith("2 replies held in the outbox by the send gap; they go out ")
    assert set(done.as_json()["reasons"][0]) == {"kind", "sentence", "held", "next_send_at"}
    assert all(kind in REASON_KINDS for kind in [*running.kinds(), *done.kinds()])


def _dead(store: Store, source_id: str, *, now: int) -> int:
    store.ingest("chat", source_id, {}, now=now)
    for attempt in range(store.options.max_attempts):
        at = now + 10_000 * attempt  # past every backoff
        gen = store.acquire("w", now=at)
        assert gen is not None
        [event] = store.claim_batch("w", gen, now=at)
        assert store.finish("w", gen, [event.id], now=at + 1, error="boom")
        store.release("w", gen, now=at + 1)
    return event.id


def test_a_discarded_event_is_never_run_again_and_says_how_it_had_died(store: Store) -> None:
    dead = _dead(store, "m", now=T)
    gone = T + 100_000
    assert store.discard([dead], now=gone) == [dead]
    why = why_not_run(store, store.event(dead), now=gone + 60)  # type: ignore[arg-type]
    assert why.title == "State" and why.kinds() == ["discarded"]
    assert why.reasons[0].facts == {"discarded_at": gone, "dead_reason": "failed", "error": "boom",
                                    "attempts": store.options.max_attempts, "pruned_at": None}
    assert why.sentences[0].startswith("discarded ")
    assert why.sentences[0].endswith("(1m00s ago): it is never run again; a retry brings it back; it had died: "
                                     f"failed {store.options.max_attempts} attempts; last error: boom")
    cleared = gone + 2 * 86_400
    assert store.prune(older_than=86_400, now=cleared).payloads_cleared == 1
    why = why_not_run(store, store.event(dead), now=cleared + 60)  # type: ignore[arg-type]
    assert why.reasons[0].facts["pruned_at"] == cleared
    assert "(1m00s ago), so it cannot be retried; it had died: " in why.sentences[0]
    assert "a retry brings it back" not in why.sentences[0]


def test_a_pending_event_discarded_before_it_failed_says_only_that(store: Store) -> None:
    store.ingest("chat", "m", {}, now=T)
    [event] = store.events()
    store.discard([event.id], now=T + 5)
    why = why_not_run(store, store.event(event.id), now=T + 65)  # type: ignore[arg-type]
    assert why.kinds() == ["discarded"] and why.reasons[0].facts["dead_reason"] is None
    assert why.sentences[0].endswith("(1m00s ago): it is never run again; a retry brings it back")


def test_a_batch_mate_of_a_poison_event_says_it_failed_with_its_batch_and_runs_alone_next(store: Store) -> None:
    store.ingest_many([("chat", "mate", {}), ("hook", "poison", {"poison": True})], now=T)
    gen = store.acquire("w", now=T)
    assert gen is not None
    mate, poison = store.claim_batch("w", gen, now=T)
    assert store.finish("w", gen, [mate.id, poison.id], now=T, error="PoisonEventError: boom", blame=poison.id)
    why = why_not_run(store, store.event(mate.id), now=T, holder="w", mode="active")  # type: ignore[arg-type]
    assert why.kinds() == ["batch_failed"] and why.reasons[0].facts == {"poison": poison.id}
    assert why.sentences == [f"failed with its batch (#{poison.id}, poison); runs alone next"]
    assert all(kind in REASON_KINDS for kind in why.kinds())
    charged = why_not_run(store, store.event(poison.id), now=T, holder="w", mode="active")  # type: ignore[arg-type]
    assert "batch_failed" not in charged.kinds() and "last error: PoisonEventError: boom" in charged.sentences[0]
