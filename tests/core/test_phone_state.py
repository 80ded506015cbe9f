"""The phone channels' durable state: cards that follow their approval whoever answers, answers taken once
under the service's id with the listener's cursor in the same transaction, every ignored answer counted."""

from __future__ import annotations

from pathlib import Path

from console.core import Batch, Store

T = 1_000_000
HOUR = 3_600


def ask(store: Store, request_id: str = "apr-1-aa", *, outbox_id: int | None = None) -> int:
    store.request_approval(request_id, "refund order 881", now=T, expires_in=HOUR)
    return outbox_id or store.queue_message(f"Approval needed [{request_id}]: refund", now=T, approval_id=request_id)


def test_a_card_is_due_once_its_approval_settles_whoever_answered(store: Store) -> None:
    message = ask(store)
    store.record_phone_message("tg", message, "42:7", now=T, request_id="apr-1-aa", shown="ask")
    assert store.phone_cards_due("tg", now=T) == []
    assert store.answer_approval("apr-1-aa", "no", now=T + 5, via="cli") == "no"
    [card] = store.phone_cards_due("tg", now=T + 5)
    assert (card.ref, card.wanted, card.shown, card.answered_via, card.action) == (
        "42:7", "no", "ask", "cli", "refund order 881")
    assert card.body.startswith("Approval needed [apr-1-aa]")
    store.phone_card_shown("tg", message, "no", now=T + 6)
    assert store.phone_cards_due("tg", now=T + 6) == [] and store.next_phone_card_at("tg") is None


def test_the_expiry_timer_settles_the_card_too(store: Store) -> None:
    message = ask(store)
    store.record_phone_message("ntfy", message, "seq-1", now=T, request_id="apr-1-aa", shown="ask")
    assert store.run_scheduler(now=T + HOUR) == 1
    [card] = store.phone_cards_due("ntfy", now=T + HOUR)
    assert (card.wanted, card.answered_via) == ("expired", "expiry")


def test_a_card_sent_after_its_approval_settled_is_put_right(store: Store) -> None:
    message = ask(store)
    store.answer_approval("apr-1-aa", "yes", now=T + 1, via="console")
    store.record_phone_message("tg", message, "42:8", now=T + 2, request_id="apr-1-aa", shown="ask")
    assert [c.wanted for c in store.phone_cards_due("tg", now=T + 2)] == ["yes"]


def test_a_plain_message_is_remembered_but_never_due(store: Store) -> None:
    message = store.queue_message("hello", now=T)
    assert store.phone_sent_ref("tg", message) is None
    store.record_phone_message("tg", message, "42:9", now=T)
    store.record_phone_message("tg", message, "42:10", now=T)  # a second record of one delivery keeps the first
    assert store.phone_sent_ref("tg", message) == "42:9" and store.phone_sent_ref("other", message) is None
    assert store.phone_cards_due("tg", now=T) == []


def test_an_answer_is_taken_once_under_its_service_id_with_the_cursor(store: Store) -> None:
    message = ask(store)
    store.record_phone_message("ntfy", message, "seq", now=T, request_id="apr-1-aa", shown="ask")
    taken = store.take_phone_answer("ntfy", "msg-1", via="ntfy", now=T + 1, request_id="apr-1-aa", answer="yes",
                                    cursor="msg-1")
    assert (taken.verdict, taken.outcome) == ("settled", "yes")
    assert store.phone_cursor("ntfy") == "msg-1"
    again = store.take_phone_answer("ntfy", "msg-1", via="ntfy", now=T + 2, request_id="apr-1-aa", answer="no")
    assert (again.verdict, again.outcome) == ("duplicate", None)
    approval = store.approval("apr-1-aa")
    assert approval is not None and (approval.outcome, approval.answered_via) == ("yes", "ntfy")
    [card] = store.phone_cards_due("ntfy", now=T + 2)
    assert card.wanted == "yes"
    # The same answer under a new id (a replayed body) or the other button: the first outcome stands, and the
    # card is to say so.
    late = store.take_phone_answer("ntfy", "msg-2", via="ntfy", now=T + 3, request_id="apr-1-aa", answer="no",
                                   cursor="msg-2")
    assert (late.verdict, late.outcome) == ("already_answered", "yes")
    assert [c.wanted for c in store.phone_cards_due("ntfy", now=T + 3)] == ["again:yes"]
    assert store.phone_cursor("ntfy") == "msg-2"
    counts = store.phone_answer_counts()
    assert (counts["settled"], counts["already_answered"], counts["duplicate"]) == (1, 1, 1)
    event = store.find_event("approval", "apr-1-aa")
    assert event is not None and event.duplicates == 1  # the replay reached the answer path, which refused it


def test_ignored_answers_change_nothing_and_are_counted(store: Store) -> None:
    ask(store)
    for key, refused in (("k1", "forged"), ("k2", "wrong_chat"), ("k3", "other_inbox")):
        taken = store.take_phone_answer("tg", key, via="telegram", now=T + 1, request_id="apr-1-aa", answer="yes",
                                        refused=refused, cursor=key)
        assert (taken.verdict, taken.outcome) == (refused, None)
    unknown = store.take_phone_answer("tg", "k4", via="telegram", now=T + 1, request_id="apr-9-zz", answer="yes")
    assert unknown.verdict == "unknown"
    malformed = store.take_phone_answer("tg", "k5", via="telegram", now=T + 1)
    assert malformed.verdict == "forged"
    assert store.approval("apr-1-aa").outcome is None  # type: ignore[union-attr]
    assert store.find_event("approval", "apr-1-aa") is None
    counts = store.status(now=T + 1)["phone_answers"]
    assert {k: v for k, v in counts.items() if v} == {"forged": 2, "wrong_chat": 1, "other_inbox": 1, "unknown": 1}
    assert store.phone_cursor("tg") == "k3"


def test_a_tap_after_the_deadline_settles_as_expired(store: Store) -> None:
    message = ask(store)
    store.record_phone_message("tg", message, "1:1", now=T, request_id="apr-1-aa", shown="ask")
    taken = store.take_phone_answer("tg", "u1", via="telegram", now=T + HOUR, request_id="apr-1-aa", answer="yes")
    assert (taken.verdict, taken.outcome) == ("late", "expired")
    assert [c.wanted for c in store.phone_cards_due("tg", now=T + HOUR)] == ["expired"]
    after = store.take_phone_answer("tg", "u2", via="telegram", now=T + HOUR, request_id="apr-1-aa", answer="no")
    assert (after.verdict, after.outcome) == ("already_answered", "expired")
    assert [c.wanted for c in store.phone_cards_due("tg", now=T + HOUR)] == ["expired"]  # still just "Expired"


def test_a_failed_card_update_waits_for_its_retry_or_is_given_up(store: Store) -> None:
    message = ask(store)
    store.record_phone_message("tg", message, "1:1", now=T, request_id="apr-1-aa", shown="ask")
    store.answer_approval("apr-1-aa", "yes", now=T + 1, via="console")
    store.phone_card_failed("tg", message, "502 from the Bot API", now=T + 1, retry_at=T + 30)
    assert store.phone_cards_due("tg", now=T + 29) == [] and store.next_phone_card_at("tg") == T + 30
    [card] = store.phone_cards_due("tg", now=T + 30)
    assert card.tries == 1
    store.phone_card_failed("tg", message, "message to edit not found", now=T + 31, retry_at=None)
    assert store.phone_cards_due("tg", now=T + 10_000) == []


def test_the_start_cursor_is_stored_once(store: Store) -> None:
    assert store.start_phone_cursor("ntfy", "1700000000", now=T) == "1700000000"
    assert store.start_phone_cursor("ntfy", "1800000000", now=T) == "1700000000"
    store.move_phone_cursor("ntfy", "abc", now=T)
    assert store.phone_cursor("ntfy") == "abc"


def test_every_inbox_has_its_own_tag(tmp_path: Path, store: Store) -> None:
    with Store.open(tmp_path / "other.db") as other:
        assert len(store.inbox_tag()) == 16 and store.inbox_tag() != other.inbox_tag()
    assert store.inbox_tag() == store.inbox_tag()


def test_card_reads_use_their_partial_index(sqlite_store: Store) -> None:
    plan = [str(row[3]) for row in sqlite_store.connection.execute(
        """EXPLAIN QUERY PLAN SELECT outbox_id FROM phone_messages INDEXED BY phone_cards_due
           WHERE channel = 'tg' AND wanted IS NOT shown""")]
    assert any("phone_cards_due" in line for line in plan)


def test_prune_drops_the_phone_records_of_what_it_prunes(store: Store) -> None:
    message = ask(store)
    store.record_phone_message("tg", message, "1:1", now=T, request_id="apr-1-aa", shown="ask")
    store.take_phone_answer("tg", "u1", via="telegram", now=T + 1, request_id="apr-1-aa", answer="yes")
    sent: list[Batch] = []
    assert store.dispatch(sent.append, now=T + 2) == 1
    store.queue_message("kept", now=T + 2)  # the newest held batch is kept (the gap counts from it)
    assert store.dispatch(sent.append, now=T + 3) == 1
    store.prune(older_than=86_400, now=T + 3 + 2 * 86_400)
    assert store.phone_sent_ref("tg", message) is None and store.phone_answers() == []


def test_a_valid_tap_on_a_card_never_recorded_adopts_it(store: Store) -> None:
    message = ask(store)  # announced; the engine that sent it stopped before recording the delivery
    taken = store.take_phone_answer("tg", "u1", via="telegram", now=T + 1, request_id="apr-1-aa", answer="yes",
                                    tapped="42:77")
    assert taken.verdict == "settled" and store.phone_sent_ref("tg", message) == "42:77"  # a retry skips it
    [card] = store.phone_cards_due("tg", now=T + 1)
    assert (card.ref, card.shown, card.wanted) == ("42:77", "ask", "yes")
    store.take_phone_answer("ntfy", "m1", via="ntfy", now=T + 2, request_id="apr-1-aa", answer="no", ref_prefix="t-")
    assert store.phone_sent_ref("ntfy", message) == f"t-{message}"
    assert [c.wanted for c in store.phone_cards_due("ntfy", now=T + 2)] == ["again:yes"]


def test_only_a_valid_tap_with_a_known_message_adopts(store: Store) -> None:
    message = ask(store)
    store.take_phone_answer("tg", "u1", via="telegram", now=T + 1, request_id="apr-1-aa", answer="yes",
                            tapped="42:77", refused="forged")
    store.take_phone_answer("tg", "u2", via="telegram", now=T + 1, request_id="apr-1-aa", answer="yes")  # no handle
    assert store.phone_sent_ref("tg", message) is None
    store.record_phone_message("tg", message, "42:5", now=T, request_id="apr-1-aa", shown="ask")
    store.take_phone_answer("tg", "u3", via="telegram", now=T + 2, request_id="apr-1-aa", answer="no", tapped="42:99")
    assert store.phone_sent_ref("tg", message) == "42:5"  # a recorded card is not replaced by another handle
