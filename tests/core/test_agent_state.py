"""The agent as a whole (ready, waiting, paused) lives in the inbox file, written under the lease and read by any
process; events a run hands back unrun return to pending without their attempt counted."""

from __future__ import annotations

from console.core import Store

NOW = 1_800_000_000


def claim(store: Store, holder: str = "w1", now: int = NOW) -> tuple[int, list[int]]:
    gen = store.acquire(holder, now=now)
    assert gen is not None
    return gen, [event.id for event in store.claim_batch(holder, gen, now=now)]


def test_unclaimed_events_are_pending_again_with_no_attempt_spent(store: Store) -> None:
    for n in range(3):
        store.ingest("chat", f"m{n}", {"n": n}, now=NOW)
    gen, ids = claim(store)
    assert len(ids) == 3
    assert store.unclaim("w1", gen, ids[1:], now=NOW + 1, reason="did not fit the model's token budget")
    assert store.finish("w1", gen, ids[:1], now=NOW + 1)
    first, second, third = (store.event(i) for i in ids)
    assert first is not None and first.status == "done"
    for event in (second, third):
        assert event is not None and (event.status, event.attempts) == ("pending", 0)
        kinds = [(a.kind, a.detail) for a in store.history(event.id)]
        assert kinds == [("claim", "attempt 1"), ("deferred", "did not fit the model's token budget")]
    # Fresh again: claimed together by the next run, as attempt 1.
    _, again = claim(store, now=NOW + 2)
    assert again == ids[1:]
    assert [store.event(i).attempts for i in again] == [1, 1]  # type: ignore[union-attr]


def test_handing_back_again_and_again_never_makes_an_event_dead(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=3, backoff_base=0) as store:
        store.ingest("chat", "m1", {}, now=NOW)
        for n in range(10):
            gen, ids = claim(store, now=NOW + n)
            assert ids and store.unclaim("w1", gen, ids, now=NOW + n, reason="the provider asked to wait")
        (event,) = store.events()
        assert (event.status, event.attempts) == ("pending", 0)


def test_a_retry_handed_back_keeps_its_earlier_attempts(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=5, backoff_base=0) as store:
        store.ingest("chat", "m1", {}, now=NOW)
        gen, ids = claim(store)
        store.finish("w1", gen, ids, now=NOW, error="boom")
        gen, ids = claim(store, now=NOW + 1)
        assert store.unclaim("w1", gen, ids, now=NOW + 1, reason="wait")
        (event,) = store.events()
        assert (event.status, event.attempts) == ("pending", 1)  # the failed attempt stays counted


def test_an_event_retried_by_hand_and_handed_back_is_still_claimed_alone(store: Store) -> None:
    store.ingest("chat", "poison", {}, now=NOW)
    store.ingest("chat", "fresh", {}, now=NOW)
    poison = store.find_event("chat", "poison")
    assert poison is not None
    store.connection.execute("UPDATE inbox SET status = 'dead', attempts = 3 WHERE id = ?", (poison.id,))
    assert store.retry_dead(poison.id, now=NOW)
    gen, ids = claim(store)
    assert ids == [poison.id]
    assert store.unclaim("w1", gen, ids, now=NOW, reason="wait")
    _, again = claim(store, now=NOW + 1)
    assert again == [poison.id]  # not batched with the fresh event it could take down


def test_a_fenced_unclaim_changes_nothing_and_is_counted(store: Store) -> None:
    store.ingest("chat", "m1", {}, now=NOW)
    gen, ids = claim(store)
    assert store.acquire("w2", now=NOW + store.options.lease_ttl + 1) == gen + 1
    assert not store.unclaim("w1", gen, ids, now=NOW + store.options.lease_ttl + 1, reason="wait")
    (event,) = store.events()
    assert (event.status, event.attempts) == ("running", 1)
    assert store.refused_finish_count() == 1
    assert [a.kind for a in store.history(event.id)][-1] == "refused"


def test_the_agent_state_is_ready_until_the_lease_holder_says_otherwise(store: Store) -> None:
    state = store.agent_state()
    assert (state.state, state.reason, state.until) == ("ready", None, None)
    assert store.status(now=NOW)["agent"] == {"state": "ready", "reason": None, "until": None}
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    assert not store.set_agent_state("w2", gen, "waiting", now=NOW, reason="not the holder", until=NOW + 30)
    assert store.set_agent_state("w1", gen, "waiting", now=NOW, reason="rate limited", until=NOW + 30)
    assert store.status(now=NOW + 29)["agent"] == {"state": "waiting", "reason": "rate limited", "until": NOW + 30}
    assert store.agent_state().waits == 1
    assert store.set_agent_state("w1", gen, "waiting", now=NOW + 30, reason="rate limited", until=NOW + 90)
    assert store.agent_state().waits == 2  # back to back: the next default wait may grow
    # Once the wait is over it reads as ready, even if no engine is left to say so.
    assert store.status(now=NOW + 90)["agent"] == {"state": "ready", "reason": None, "until": None}
    assert store.set_agent_state("w1", gen, "ready", now=NOW + 91)
    assert store.agent_state().waits == 0


def test_a_pause_tells_the_owner_once(store: Store) -> None:
    gen = store.acquire("w1", now=NOW)
    assert gen is not None
    notice = "The agent is paused: the Claude API refused the key (401: invalid x-api-key)"
    for n in range(3):
        assert store.set_agent_state("w1", gen, "paused", now=NOW + n, reason="refused the key (401)",
                                     notice=notice, notice_key="cfg1:auth")
    assert store.status(now=NOW)["agent"] == {"state": "paused", "reason": "refused the key (401)", "until": None}
    (message,) = store.outbox_messages()
    assert message.body == notice and message.urgent
    # A restart tries again without telling the owner twice about the same configuration ...
    assert store.set_agent_state("w1", gen, "ready", now=NOW + 5)
    assert store.set_agent_state("w1", gen, "paused", now=NOW + 6, reason="refused the key (401)",
                                 notice=notice, notice_key="cfg1:auth")
    assert len(store.outbox_messages()) == 1
    # ... while a new configuration that fails, or the same one failing after it had worked, is news.
    assert store.set_agent_state("w1", gen, "paused", now=NOW + 7, reason="unknown model",
                                 notice="paused: unknown model", notice_key="cfg2:model")
    assert store.set_agent_state("w1", gen, "ready", now=NOW + 8, worked=True)
    assert store.set_agent_state("w1", gen, "paused", now=NOW + 9, reason="unknown model",
                                 notice="paused: unknown model", notice_key="cfg2:model")
    assert [m.body for m in store.outbox_messages()].count("paused: unknown model") == 2
