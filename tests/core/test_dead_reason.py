"""Facts as fields: why an event died is a column written when it dies, and an event's replies are read by
its own index, not picked out of the newest outbox rows."""

from __future__ import annotations

from pathlib import Path

from console.core import DEAD_REASONS, Event, OutboxDraft, Store
from console.core.db import connect

T = 1_000_000


def claim(store: Store, holder: str, now: int) -> tuple[int, list[Event]]:
    gen = store.acquire(holder, now=now)
    assert gen is not None
    return gen, store.claim_batch(holder, gen, now=now)


def only_event(store: Store) -> Event:
    [event] = store.events()
    return event


def test_a_run_failing_its_last_attempt_dies_failed_with_the_error_itself(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db", max_attempts=2, backoff_base=0) as store:
        store.ingest("chat", "m", {}, now=T)
        for attempt in (1, 2):
            gen, [event] = claim(store, "A", T + attempt)
            store.finish("A", gen, [event.id], now=T + attempt, error=f"tool failed {attempt}")
        dead = only_event(store)
        assert (dead.status, dead.dead_reason, dead.error) == ("dead", "failed", "tool failed 2")
        assert dead.death_in_words() == "failed 2 attempts; last error: tool failed 2"
        assert store.history(dead.id)[-1].detail == "failed 2 attempts; last error: tool failed 2"

        assert store.retry_dead(dead.id, now=T + 10)
        again = only_event(store)
        assert (again.status, again.dead_reason, again.death_in_words()) == ("pending", None, None)
        was = "failed 2 attempts; last error: tool failed 2"
        assert store.history(dead.id)[-1].detail == f"retried by hand (was: {was})"


def test_a_worker_lost_on_the_last_attempt_kills_the_event_as_lost(tmp_path: Path) -> None:
    with Store.open(tmp_path / "inbox.db", max_attempts=1, lease_ttl=60) as store:
        store.ingest("chat", "m", {}, now=T)
        claim(store, "A", T)  # A crashes holding it
        claim(store, "B", T + 61)  # B takes over: A's claim was the last attempt
        dead = only_event(store)
        assert (dead.dead_reason, dead.error) == ("lost", "worker of generation 1 lost its lease mid-run")
        assert dead.death_in_words() == "worker of generation 1 lost its lease mid-run; out of attempts (1 attempt)"


def test_a_retry_found_with_no_attempts_left_dies_out_of_attempts_keeping_its_last_error(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with Store.open(path, max_attempts=3, backoff_base=0) as store:
        store.ingest("chat", "m", {}, now=T)
        gen, [event] = claim(store, "A", T)
        store.finish("A", gen, [event.id], now=T, error="timeout")
        assert only_event(store).status == "pending"
    with Store.open(path, max_attempts=1, backoff_base=0) as lowered:  # the owner lowered max_attempts
        assert claim(lowered, "A", T + 5)[1] == []
        dead = only_event(lowered)
        assert (dead.status, dead.dead_reason, dead.error) == ("dead", "out_of_attempts", "timeout")
        assert dead.dead_reason in DEAD_REASONS


def test_events_that_died_before_the_field_keep_their_old_sentence_and_no_guessed_reason(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = connect(path, schema_version=12)
    sentences = {
        "a": "failed 3 of 3 attempts; last error: boom",
        "b": "worker of generation 4 lost its lease mid-run; out of attempts (3 of 3)",
        "c": "out of attempts (3 of 3)",
    }
    with old:
        for source_id, error in sentences.items():
            old.execute("INSERT INTO inbox (source, source_id, payload, status, attempts, error, created_at, "
                        "updated_at) VALUES ('chat', ?, '{}', 'dead', 3, ?, ?, ?)", (source_id, error, T, T))
        old.execute("INSERT INTO inbox (source, source_id, payload, status, error, created_at, updated_at) "
                    "VALUES ('chat', 'd', '{}', 'pending', 'flaky', ?, ?)", (T, T))
    old.close()
    with Store.open(path) as store:
        found = {e.source_id: (e.dead_reason, e.death_in_words()) for e in store.events()}
    # the reason was not recorded as a fact then: it is not guessed from the prose, which is shown as it was
    assert found == {"a": (None, sentences["a"]), "b": (None, sentences["b"]), "c": (None, sentences["c"]),
                     "d": (None, None)}


def test_an_events_replies_come_from_its_own_rows_oldest_first_however_many_others_follow(store: Store) -> None:
    store.ingest("chat", "m", {}, now=T)
    gen, [event] = claim(store, "A", T)
    store.finish("A", gen, [event.id], now=T, messages=["first", OutboxDraft("second", urgent=True)])
    for n in range(300):  # more than a pane's window of newer messages from other events
        store.queue_message(f"other {n}", now=T + 1, event_id=event.id + 1)
    replies = store.event_replies(event.id)
    assert [(m.body, m.urgent, m.event_id, m.status) for m in replies] == [
        ("first", False, event.id, "queued"), ("second", True, event.id, "queued")]
    assert store.event_replies(event.id, limit=1)[0].body == "first"
    assert store.event_replies(event.id + 5) == []


def test_replies_are_read_by_their_index(sqlite_store: Store) -> None:
    """SQLite's plan (PostgreSQL's, on a table large enough to be worth an index: tests/core/test_postgres.py)."""
    plan = " ".join(sqlite_store.query_plan("SELECT id FROM outbox WHERE event_id = ? ORDER BY id", (1,)))
    assert "outbox_event" in plan
