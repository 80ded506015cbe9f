"""Pruning old finished work: payloads and sent messages go, every key and every unfinished event stays."""

from __future__ import annotations

import pytest

from console.core import Batch, Store
from tests.core.backends import counting_commits

DAY = 86_400
T = 1_000_000_000
NOW = T + 100 * DAY
HOLDER = "worker"


def run(store: Store, source_ids: list[str], *, at: int, error: str | None = None,
        messages: tuple[str, ...] = ()) -> None:
    """Ingest, claim and finish these events at `at`."""
    gen = store.acquire(HOLDER, now=at)
    assert gen is not None
    store.ingest_many([("chat", sid, {"text": f"payload of {sid}"}) for sid in source_ids], now=at)
    events = store.claim_batch(HOLDER, gen, now=at)
    assert store.finish(HOLDER, gen, [e.id for e in events], now=at, error=error, messages=messages)
    assert store.release(HOLDER, gen, now=at)


def payloads(store: Store) -> dict[str, object]:
    return {e.source_id: e.payload for e in store.events(limit=1_000)}


def test_only_old_finished_payloads_are_cleared_and_every_key_still_refuses(inbox_target: str) -> None:
    with Store.open(inbox_target, max_attempts=1) as store:
        run(store, ["old-done"], at=T)
        run(store, ["old-dead"], at=T, error="boom")  # one attempt: dead at once
        store.ingest("chat", "old-pending", {"text": "never run"}, now=T)
        run(store, ["recent-done"], at=NOW - DAY // 2)
        assert store.find_event("chat", "old-dead").status == "dead"  # type: ignore[union-attr]

        report = store.prune(older_than=30 * DAY, now=NOW)

        assert (report.cutoff, report.payloads_cleared) == (NOW - 30 * DAY, 1)
        kept = payloads(store)
        assert kept["old-done"] is None
        assert kept["old-dead"] == {"text": "payload of old-dead"}  # dead: the user may still retry it
        assert kept["old-pending"] == {"text": "never run"}
        assert kept["recent-done"] == {"text": "payload of recent-done"}
        pruned = store.find_event("chat", "old-done")
        assert pruned is not None and (pruned.status, pruned.pruned_at) == ("done", NOW)
        assert [a.kind for a in store.history(pruned.id)] == ["claim", "finish"]  # its history stays

        assert store.ingest("chat", "old-done", {"text": "redelivered"}, now=NOW) is False  # the key still refuses
        assert store.find_event("chat", "old-done").duplicates == 1  # type: ignore[union-attr]
        assert store.prune(older_than=30 * DAY, now=NOW).payloads_cleared == 0  # nothing twice
        assert store.integrity_check() == "ok"


def test_an_event_finished_after_the_cutoff_keeps_its_payload(inbox_target: str) -> None:
    with Store.open(inbox_target, backoff_base=0) as store:
        store.ingest("chat", "slow", {"text": "retried for weeks"}, now=T)
        gen = store.acquire(HOLDER, now=NOW - DAY)
        assert gen is not None
        [event] = store.claim_batch(HOLDER, gen, now=NOW - DAY)
        assert store.finish(HOLDER, gen, [event.id], now=NOW - DAY)  # created long ago, done yesterday
        assert store.prune(older_than=30 * DAY, now=NOW).payloads_cleared == 0
        assert payloads(store)["slow"] == {"text": "retried for weeks"}


def test_sent_messages_go_but_queued_ones_and_the_gap_stay(inbox_target: str) -> None:
    with Store.open(inbox_target, outbox_gap=3600) as store:
        sent: list[Batch] = []
        for day in range(3):  # three held batches sent long ago, one a day
            store.queue_message(f"old news {day}", now=T + day * DAY)
            assert store.dispatch(sent.append, now=T + day * DAY) == 1
        store.queue_message("sent an hour ago", now=NOW - 3600)
        assert store.dispatch(sent.append, now=NOW - 3600) == 1
        store.queue_message("still queued", now=NOW - 60)  # held: the gap has not passed

        report = store.prune(older_than=30 * DAY, now=NOW)

        assert (report.messages_deleted, report.batches_deleted) == (3, 3)
        left = {m.body: m.status for m in store.outbox_messages(limit=100)}
        assert left == {"sent an hour ago": "sent", "still queued": "queued"}
        assert store.outbox_counts()["sent"] == 1
        assert store.dispatch(sent.append, now=NOW - 1) == 0  # the gap still counts from the last send
        assert store.dispatch(sent.append, now=NOW) == 1


def test_the_last_sent_batch_is_kept_however_old_it_is(inbox_target: str) -> None:
    with Store.open(inbox_target, outbox_gap=200 * DAY) as store:
        store.queue_message("the only send", now=T)
        assert store.dispatch(lambda batch: None, now=T) == 1
        assert store.prune(older_than=30 * DAY, now=NOW).batches_deleted == 0
        store.queue_message("next", now=NOW)
        assert store.dispatch(lambda batch: None, now=NOW) == 0  # 200 days from T have not passed


def test_a_dry_run_counts_and_changes_nothing(inbox_target: str) -> None:
    with Store.open(inbox_target) as store:
        run(store, [f"e{n}" for n in range(5)], at=T, messages=("one reply",))
        assert store.dispatch(lambda batch: None, now=T) == 1
        store.queue_message("a later send", now=T + DAY)
        assert store.dispatch(lambda batch: None, now=T + 2 * DAY) == 1
        before = (payloads(store), store.outbox_counts())

        preview = store.prune(older_than=30 * DAY, now=NOW, dry_run=True)
        assert before == (payloads(store), store.outbox_counts())

        done = store.prune(older_than=30 * DAY, now=NOW)
        assert (preview.payloads_cleared, preview.messages_deleted, preview.batches_deleted) == (5, 1, 1)
        assert preview == done


def test_many_events_are_cleared_in_short_transactions(inbox_target: str) -> None:
    with Store.open(inbox_target, batch_cap=2_000) as store:
        run(store, [f"e{n}" for n in range(1_234)], at=T)
        with counting_commits(store) as commits:
            assert store.prune(older_than=30 * DAY, now=NOW, chunk=100).payloads_cleared == 1_234
        assert all(p is None for p in payloads(store).values())
        assert len(commits) == 13  # 12 chunks of 100 and one of 34: the write lock is never held for long


@pytest.mark.parametrize(("older_than", "chunk"), [(DAY - 1, 100), (30 * DAY, 0)])
def test_too_short_an_age_or_an_empty_chunk_is_refused(inbox_target: str, older_than: int, chunk: int) -> None:
    with Store.open(inbox_target) as store:
        run(store, ["e"], at=NOW - 2)
        with pytest.raises(ValueError, match=r"older_than|chunk"):
            store.prune(older_than=older_than, now=NOW, chunk=chunk)
        assert payloads(store)["e"] == {"text": "payload of e"}


def test_journal_steps_of_old_finished_events_go_and_others_stay(inbox_target: str) -> None:
    with Store.open(inbox_target) as store:
        for at, sid in ((T, "old"), (NOW - 60, "recent")):
            gen = store.acquire(HOLDER, now=at)
            assert gen is not None and store.ingest("chat", sid, {}, now=at)
            [event] = store.claim_batch(HOLDER, gen, now=at)
            for step in range(2):
                store.run_once(f"{sid}:step-{step}", lambda: "done", gen=gen, now=at, event_id=event.id)
            assert store.finish(HOLDER, gen, [event.id], now=at) and store.release(HOLDER, gen, now=at)
        gen = store.acquire(HOLDER, now=NOW)
        assert gen is not None
        store.run_once("maintenance", lambda: "not tied to an event", gen=gen, now=NOW)

        report = store.prune(older_than=30 * DAY, now=NOW)

        assert (report.steps_deleted, report.open_conversations) == (2, 0)
        assert store.journal_step("old:step-0") is None and store.journal_step("old:step-1") is None
        assert store.journal_step("recent:step-0") is not None
        assert store.journal_step("maintenance") is not None


def asked_for_approval(store: Store, *, expires_in: int) -> int:
    """A run at T that journals a step, saves its session and asks approval apr-1; the lease's generation."""
    gen = store.acquire(HOLDER, now=T)
    assert gen is not None and store.ingest("chat", "refund", {"text": "refund 881"}, now=T)
    [event] = store.claim_batch(HOLDER, gen, now=T)
    store.run_once("refund:lookup", lambda: {"order": 881}, gen=gen, now=T, event_id=event.id)
    store.save_session("apr-1", {"action": "refund 881"}, now=T)
    store.request_approval("apr-1", "refund 881", now=T, expires_in=expires_in, session_id="apr-1")
    assert store.finish(HOLDER, gen, [event.id], now=T)
    return gen


def test_an_open_approval_keeps_every_step_and_session_until_it_is_settled(inbox_target: str) -> None:
    with Store.open(inbox_target, backoff_base=0) as store:
        gen = asked_for_approval(store, expires_in=200 * DAY)

        waiting = store.prune(older_than=30 * DAY, now=NOW)
        assert (waiting.open_conversations, waiting.steps_deleted, waiting.sessions_deleted) == (1, 0, 0)
        assert waiting.payloads_cleared == 1  # the question's payload is not what the answer resumes from
        assert store.journal_step("refund:lookup") is not None and store.load_session("apr-1") is not None

        assert store.answer_approval("apr-1", "yes", now=NOW) == "yes"  # the answer arrives...
        assert store.prune(older_than=30 * DAY, now=NOW).open_conversations == 1  # ...but has not run yet
        gen = store.acquire(HOLDER, now=NOW)
        assert gen is not None
        [answer] = store.claim_batch(HOLDER, gen, now=NOW)
        assert store.load_session("apr-1") is not None  # what the resumed run reads
        assert store.finish(HOLDER, gen, [answer.id], now=NOW)

        settled = store.prune(older_than=30 * DAY, now=NOW + 31 * DAY)
        assert (settled.open_conversations, settled.steps_deleted, settled.sessions_deleted) == (0, 1, 1)
        assert store.journal_step("refund:lookup") is None and store.load_session("apr-1") is None


def test_an_event_discarded_before_the_cutoff_is_cleared_like_a_finished_one_and_stays_discarded(
    inbox_target: str
) -> None:
    """Discarding is the owner's final word on an event (done's twin): retention clears it the same way, and
    a cleared one cannot be brought back (its payload and its journal, what stops a repeat, are gone)."""
    with Store.open(inbox_target, max_attempts=1) as store:
        gen = store.acquire(HOLDER, now=T)
        assert gen is not None and store.ingest("chat", "old-discarded", {"text": "poison"}, now=T)
        [event] = store.claim_batch(HOLDER, gen, now=T)
        store.run_once("old-discarded:step", lambda: "sent", gen=gen, now=T, event_id=event.id)
        assert store.finish(HOLDER, gen, [event.id], now=T, error="boom") and store.release(HOLDER, gen, now=T)
        store.ingest("chat", "recently-discarded", {"text": "given up yesterday"}, now=T)
        old = store.find_event("chat", "old-discarded")
        recent = store.find_event("chat", "recently-discarded")
        assert old is not None and recent is not None and old.status == "dead"
        assert store.discard([old.id], now=T + DAY) == [old.id]
        assert store.discard([recent.id], now=NOW - DAY) == [recent.id]

        assert store.prune(older_than=30 * DAY, now=NOW, dry_run=True).payloads_cleared == 1
        report = store.prune(older_than=30 * DAY, now=NOW)

        assert (report.payloads_cleared, report.steps_deleted) == (1, 1)
        assert payloads(store) == {"old-discarded": None, "recently-discarded": {"text": "given up yesterday"}}
        assert store.journal_step("old-discarded:step") is None
        assert store.retry_events([old.id, recent.id], now=NOW) == [recent.id]  # the cleared one stays put
        cleared = store.event(old.id)
        assert cleared is not None and (cleared.status, cleared.pruned_at, cleared.dead_reason) == (
            "discarded", NOW, "failed")
        assert store.ingest("chat", "old-discarded", {"text": "redelivered"}, now=NOW) is False
        assert store.integrity_check() == "ok"


def test_a_discarded_answer_keeps_its_conversation_open_until_retention_clears_it(inbox_target: str) -> None:
    """An answer event the owner gave up on could still be retried, resuming the conversation from its journal;
    once retention clears it, it never can, and the conversation no longer holds every step back."""
    with Store.open(inbox_target, max_attempts=1) as store:
        gen = asked_for_approval(store, expires_in=DAY)
        assert store.answer_approval("apr-1", "yes", now=T + 60) == "yes"
        [answer] = store.claim_batch(HOLDER, gen, now=T + 60)
        assert store.finish(HOLDER, gen, [answer.id], now=T + 60, error="the tool crashed")  # dead: one attempt
        assert store.discard([answer.id], now=NOW - DAY) == [answer.id]

        kept = store.prune(older_than=30 * DAY, now=NOW)  # discarded yesterday: it may still be retried
        assert (kept.open_conversations, kept.steps_deleted, kept.sessions_deleted) == (1, 0, 0)
        assert store.journal_step("refund:lookup") is not None and store.load_session("apr-1") is not None

        cleared = store.prune(older_than=30 * DAY, now=NOW + 31 * DAY)
        assert (cleared.open_conversations, cleared.steps_deleted, cleared.sessions_deleted) == (0, 1, 1)
        assert store.journal_step("refund:lookup") is None and store.load_session("apr-1") is None
        assert store.retry_events([answer.id], now=NOW + 31 * DAY) == []
