"""The chat sources' state in the inbox (issue 20), on both backends: a read of the listener and its cursor in one
transaction, copies refused, pairing codes used once and before they expire, strangers counted and told once an
hour, the health said once, and a run's replies addressed to the chat message they answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from console.core import StaleGeneration, Store
from console.core.mail import MailCursor
from console.edges.chatsource import code_hash

NOW = 1_790_000_000


def test_a_read_is_stored_with_its_cursor_and_a_copy_is_refused(store: Store) -> None:
    take = store.take_chat_updates("telegram", "telegram", now=NOW, cursor="11",
                                   events=[("5:1", {"kind": "chat", "text": "hi", "owner": True})])
    assert take.stored == [True] and store.phone_cursor("telegram") == "11"
    again = store.take_chat_updates("telegram", "telegram", now=NOW, cursor="11",
                                    events=[("5:1", {"kind": "chat", "text": "hi", "owner": True})])
    assert again.stored == [False] and len(store.events(source="telegram")) == 1
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="9")  # a late commit of a lost listener
    assert store.phone_cursor("telegram") == "11"


def test_strangers_are_counted_and_told_once_an_hour(store: Store) -> None:
    assert store.take_chat_updates("telegram", "telegram", now=NOW, strangers=["7", "7"]).tell == ["7"]
    assert store.take_chat_updates("telegram", "telegram", now=NOW + 3599, strangers=["7"]).tell == []
    assert store.take_chat_updates("telegram", "telegram", now=NOW + 3600, strangers=["7"]).tell == ["7"]
    assert store.chat_status("telegram")["refused_messages"] == 4


def test_a_code_pairs_once_and_not_after_it_expires(store: Store) -> None:
    store.new_pair_code("telegram", code_hash("abc"), expires_at=NOW + 600)
    assert not store.pair_chat("telegram", code_hash("abd"), chat_id="5", owner_id="5", kind="private", title=None,
                               now=NOW)
    assert store.pair_chat("telegram", code_hash("ABC"), chat_id="5", owner_id="5", kind="private", title=None,
                           now=NOW + 600)
    assert not store.pair_chat("telegram", code_hash("ABC"), chat_id="6", owner_id="6", kind="private", title=None,
                               now=NOW + 1)
    store.new_pair_code("telegram", code_hash("late"), expires_at=NOW + 600)
    assert not store.pair_chat("telegram", code_hash("late"), chat_id="6", owner_id="6", kind="private", title=None,
                               now=NOW + 601)
    assert [p.chat_id for p in store.chat_pairings("telegram")] == ["5"]
    assert store.chat_status("telegram")["paired_chats"][0]["owner_id"] == "5"
    assert store.unpair_chat("telegram", "5") == 1 and store.chat_pairings("telegram") == []


def test_health_changes_are_said_once(store: Store) -> None:
    assert store.chat_status("telegram")["state"] == "off"
    assert store.set_chat_health("telegram", "paused", "401", now=NOW)
    assert not store.set_chat_health("telegram", "paused", "401", now=NOW + 1)
    assert store.chat_health("telegram") == ("paused", "401")
    assert store.set_chat_health("telegram", "ok", None, now=NOW + 2)


def test_a_runs_reply_answers_the_last_chat_message_of_its_batch(store: Store) -> None:
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="3",
                            events=[("5:1", {"text": "a"}), ("5:2", {"text": "b"})])
    gen = store.acquire("w", now=NOW)
    assert gen is not None
    ids = [e.id for e in store.claim_batch("w", gen, now=NOW)]
    assert store.conversation_of(ids) == "telegram:5:2"
    assert store.finish("w", gen, ids, now=NOW, messages=["noted"])
    [message] = store.event_replies(ids[0])
    assert store.outbox_reply_to(message.id) == "telegram:5:2" and message.urgent


def test_a_reply_goes_back_to_a_chat_only_when_every_event_of_the_run_came_from_it(store: Store) -> None:
    """Issue 31: the owner's private question batched with a group's message must not be answered in the group;
    a webhook's delivery batched with a chat's message is not that chat's to read."""
    store.ingest("github", "d1", {"x": 1}, now=NOW)
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="3",
                            events=[("5:1", {"text": "a"}), ("-100:7", {"text": "b"}), ("5:2", {"text": "c"})])
    store.take_mail("email", MailCursor(5, 10, NOW), now=NOW, events=[
        ("5:9", {"kind": "email", "from": {"address": "Me@example.org"}}),
        ("5:10", {"kind": "email", "from": {"address": "me@example.org"}})])
    hook, dm, group, dm2, mail, mail2 = (e.id for e in sorted(store.events(), key=lambda e: e.id))
    assert store.conversation_of([dm, dm2]) == "telegram:5:2"
    assert store.conversation_of([mail, mail2]) == "email:5:10"  # one sender: one conversation
    for mixed in ([hook, dm], [dm, group], [group, dm2], [dm, mail], [hook]):
        assert store.conversation_of(mixed) is None, mixed


def test_the_owners_pause_holds_until_the_owner_resumes(store: Store) -> None:
    assert store.pause_by_owner(now=NOW, via="Telegram") and not store.pause_by_owner(now=NOW, via="Telegram")
    state = store.agent_state()
    assert state.owner_paused and state.public(NOW + 10**6)["state"] == "paused"
    assert store.resume_by_owner(now=NOW + 1) and not store.resume_by_owner(now=NOW + 2)
    assert store.agent_state().state == "ready"


def test_a_message_the_inbox_cannot_take_is_skipped_not_a_stuck_loop(store: Store) -> None:
    huge = {"text": "x" * (store.options.max_payload_bytes + 1)}
    take = store.take_chat_updates("telegram", "telegram", now=NOW, cursor="8",
                                   events=[("5:1", huge), ("5:2", {"text": "fine"})])
    assert take.stored == [True] and store.phone_cursor("telegram") == "8"
    assert store.chat_status("telegram")["skipped_updates"] == 1
    assert [e.source_id for e in store.events(source="telegram")] == ["5:2"]


def test_a_kept_update_the_listener_already_took_is_refused_not_kept_again(store: Store) -> None:
    # Webhook mode: Telegram may POST an update again after the listener took it (our 200 was lost on the way). The
    # taken update is remembered (taken_at, for TAKEN_KEPT_SECONDS), so the redelivery is answered as one and not
    # kept to be taken twice; the listener reads only what is not taken yet.
    assert store.queue_chat_update("telegram", 901, {"update_id": 901}, now=NOW, channel="telegram")
    assert not store.queue_chat_update("telegram", 901, {"update_id": 901}, now=NOW, channel="telegram")
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="902", kept=[("telegram", 901)])
    assert not store.queue_chat_update("telegram", 901, {"update_id": 901}, now=NOW + 5, channel="telegram")
    assert store.chat_updates("telegram", from_id=0) == []
    assert store.queue_chat_update("telegram", 902, {"update_id": 902}, now=NOW + 5, channel="telegram")
    assert store.chat_updates("telegram", from_id=0) == [{"update_id": 902}]
    # Taken long ago, it is forgotten with the next take (a redelivery that late would be kept and taken again:
    # the inbox refuses a copy of a message, the answers' ledger a tap).
    store.take_chat_updates("telegram", "telegram", now=NOW + 8 * 86400, kept=[("telegram", 902)])
    assert store.queue_chat_update("telegram", 901, {"update_id": 901}, now=NOW + 8 * 86400, channel="telegram")


def test_a_listener_whose_engine_lost_the_lease_writes_nothing(store: Store) -> None:
    """Every write of a chat source's listener (its cursor with what it read, a pairing, a command passed, a tap, its
    health, the kept updates it takes) and of the mail listener is fenced like a run's: checked against the lease
    holder and generation in its own transaction. One whose engine lost the lease (a takeover while its poll was
    under way) changes nothing, gets StaleGeneration, and the refusal is recorded (fencing made visible)."""
    first = store.acquire("a", now=NOW)
    assert first is not None
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="11", holder="a", gen=first)
    store.queue_chat_update("telegram", 11, {"update_id": 11}, now=NOW, channel="telegram")
    store.new_pair_code("telegram", code_hash("CODE"), expires_at=NOW + 600)
    store.request_approval("r1", "deploy", now=NOW, expires_in=600)
    later = NOW + store.options.lease_ttl + 1
    second = store.acquire("b", now=later)
    assert second == first + 1  # a takeover: "a" is fenced off
    stale = {"holder": "a", "gen": first}
    writes: list[Callable[[], object]] = [
        lambda: store.take_chat_updates("telegram", "telegram", now=later, cursor="12", kept=[("telegram", 11)],
                                        events=[("5:1", {"kind": "chat", "text": "hi", "owner": True})], **stale),
        lambda: store.pair_chat("telegram", code_hash("CODE"), chat_id="5", owner_id="5", kind="private", title=None,
                                now=later, channel="telegram", cursor="12", **stale),
        lambda: store.move_phone_cursor("telegram", "12", now=later, **stale),
        lambda: store.take_phone_answer("telegram", "12", via="telegram", now=later, request_id="r1", answer="yes",
                                        cursor="12", **stale),
        lambda: store.set_chat_health("telegram", "conflict", "409", now=later, **stale),
        lambda: store.take_mail("mail", MailCursor(1, 5, NOW), now=later, events=[("1:5", {"text": "hi"})], **stale),
    ]
    for write in writes:
        with pytest.raises(StaleGeneration):
            write()
    assert store.phone_cursor("telegram") == "11" and store.mail_cursor("mail") is None
    assert store.events() == [] and store.chat_pairings("telegram") == [] and store.phone_answers() == []
    assert store.chat_health("telegram") == ("off", None) and store.approval("r1").outcome is None
    assert [u["update_id"] for u in store.chat_updates("telegram", from_id=0)] == [11]
    refused = store.refused_finishes()
    assert len(refused) == len(writes) and {r.kind for r in refused} == {"listen"}
    assert {(r.holder, r.gen, r.lease_holder, r.lease_gen) for r in refused} == {("a", first, "b", second)}
    # The holder's own writes go through.
    assert store.take_chat_updates("telegram", "telegram", now=later, cursor="12", holder="b", gen=second).stored == []
    assert store.phone_cursor("telegram") == "12"



def test_a_kept_update_delivered_out_of_order_is_taken_not_dropped(store: Store) -> None:
    """Webhook mode: Telegram may deliver updates out of order (its docs: update ids let you restore the order), so
    update 10 can be kept after the listener read 11, or after it took 11. Each is still taken: what the listener
    marks taken is exactly what it read, in the transaction that takes it; a redelivery of a taken update is still
    kept once. Before, forgetting 'below the last update read' deleted 10 unread, and a 10 arriving once the cursor
    had passed it was refused as a redelivery: lost either way."""
    def kept() -> list[int]:
        return [u["update_id"] for u in store.chat_updates("telegram", from_id=0)]

    def message(update_id: int) -> dict[str, object]:
        return {"update_id": update_id, "message": {"message_id": update_id}}

    assert store.queue_chat_update("telegram", 11, message(11), now=NOW, channel="telegram")
    read = kept()
    assert store.queue_chat_update("telegram", 10, message(10), now=NOW, channel="telegram")  # while 11 is taken
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="12", events=[("5:11", {"text": "eleven"})],
                            kept=[("telegram", update_id) for update_id in read])
    assert kept() == [10]  # not read yet, not dropped
    assert store.queue_chat_update("telegram", 9, message(9), now=NOW, channel="telegram")  # later, and older still
    assert not store.queue_chat_update("telegram", 11, message(11), now=NOW, channel="telegram")  # taken: kept once
    assert kept() == [9, 10]
    store.take_chat_updates("telegram", "telegram", now=NOW, cursor="12", kept=[("telegram", 9), ("telegram", 10)],
                            events=[("5:9", {"text": "nine"}), ("5:10", {"text": "ten"})])
    assert kept() == [] and len(store.events(source="telegram")) == 3
