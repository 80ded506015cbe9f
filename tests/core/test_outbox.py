"""The paced outbox: a gap between sends, batching, the urgent lane, retries under one key, failures."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Batch, ChannelOutcome, SendError, Store
from tests.core.workers import spawn
from tests.support import send_due

T = 1_000_000
GAP = 3_600


@pytest.fixture
def outbox(inbox_target: str) -> Iterator[Store]:
    store = Store.open(inbox_target, outbox_gap=GAP, backoff_base=10, backoff_jitter=0.0, send_timeout=60)
    try:
        yield store
    finally:
        store.close()


class Channel:
    """A channel that records what it was sent and fails when told to."""

    def __init__(self) -> None:
        self.sent: list[Batch] = []
        self.fail_with: Exception | None = None

    def __call__(self, batch: Batch) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append(batch)


def test_the_first_message_goes_at_once_then_the_gap_holds_the_rest(outbox: Store) -> None:
    channel = Channel()
    outbox.queue_message("build is green", now=T)
    assert outbox.dispatch(channel, now=T) == 1
    for n in range(3):
        outbox.queue_message(f"update {n}", now=T + 60 * (n + 1))
        assert outbox.dispatch(channel, now=T + 60 * (n + 1)) == 0
    assert outbox.next_send_at(now=T + 300) == T + GAP
    assert outbox.dispatch(channel, now=T + GAP - 1) == 0
    assert outbox.dispatch(channel, now=T + GAP) == 3
    assert [b.bodies for b in channel.sent] == [["build is green"], ["update 0", "update 1", "update 2"]]
    assert channel.sent[1].text == "update 0\n\nupdate 1\n\nupdate 2"
    assert len({b.key for b in channel.sent}) == 2
    assert outbox.dispatch(channel, now=T + 2 * GAP) == 0  # nothing queued: nothing sent
    assert outbox.next_send_at(now=T + 2 * GAP) is None
    assert outbox.outbox_counts() == {"queued": 0, "sending": 0, "sent": 4, "failed": 0, "retrying": 0, "held": 0}


def test_urgent_messages_bypass_the_gap_without_resetting_it(outbox: Store) -> None:
    channel = Channel()
    outbox.queue_message("daily digest", now=T)
    outbox.dispatch(channel, now=T)
    outbox.queue_message("held news", now=T + 10)
    outbox.queue_message("the deploy failed", now=T + 20, urgent=True)
    assert outbox.next_send_at(now=T + 20) == T + 20
    assert outbox.dispatch(channel, now=T + 20) == 1
    assert channel.sent[-1].bodies == ["the deploy failed"] and channel.sent[-1].urgent
    assert outbox.dispatch(channel, now=T + 30) == 0  # the held message still waits for the gap
    assert outbox.last_send_at() == T  # the urgent send did not restart the gap
    assert outbox.dispatch(channel, now=T + GAP) == 1
    assert channel.sent[-1].bodies == ["held news"] and not channel.sent[-1].urgent


def test_a_failed_send_is_kept_and_retried_under_the_same_key(outbox: Store) -> None:
    channel = Channel()
    outbox.queue_message("report ready", now=T)
    outbox.queue_message("two more issues", now=T)
    channel.fail_with = ConnectionError("connection refused")
    assert outbox.dispatch(channel, now=T) == 0
    failed = outbox.outbox_messages()
    assert {m.status for m in failed} == {"sending"}  # neither sent nor dropped
    assert {m.error for m in failed} == {"ConnectionError: connection refused"}
    assert {m.next_try_at for m in failed} == {T + 10}
    assert outbox.outbox_counts()["retrying"] == 1
    assert outbox.next_send_at(now=T + 1) == T + 10

    outbox.queue_message("held behind the retry", now=T + 5)
    channel.fail_with = None
    assert outbox.dispatch(channel, now=T + 9) == 0  # not before its retry time
    assert channel.sent == []
    channel.fail_with = SendError("HTTP 503")
    assert outbox.dispatch(channel, now=T + 10) == 0
    retry_at = outbox.outbox_messages()[-1].next_try_at
    assert retry_at == T + 10 + 20  # the delay doubles
    channel.fail_with = None
    assert outbox.dispatch(channel, now=T + 30) == 2
    [batch] = channel.sent
    assert batch.bodies == ["report ready", "two more issues"]
    assert batch.attempt == 3
    assert batch.key == failed[0].batch_key  # the channel can drop a copy it already has
    assert {m.status for m in outbox.outbox_messages() if m.body != "held behind the retry"} == {"sent"}
    # The message queued meanwhile waited for the retried batch, then for the gap.
    assert outbox.dispatch(channel, now=T + 31) == 0
    assert outbox.dispatch(channel, now=T + 30 + GAP) == 1
    assert channel.sent[-1].bodies == ["held behind the retry"]


def test_a_permanent_failure_marks_the_batch_failed_with_its_reason(outbox: Store) -> None:
    channel = Channel()
    outbox.queue_message("to a deleted channel", now=T)
    channel.fail_with = SendError("HTTP 404 channel_not_found", permanent=True)
    assert outbox.dispatch(channel, now=T) == 0
    [message] = outbox.outbox_messages()
    assert (message.status, message.error, message.next_try_at) == ("failed", "HTTP 404 channel_not_found", None)
    channel.fail_with = None
    assert outbox.dispatch(channel, now=T + 10 * GAP) == 0  # never retried
    assert outbox.outbox_counts()["failed"] == 1
    outbox.queue_message("later news", now=T + 10 * GAP)  # a failure does not block the lane
    assert outbox.dispatch(channel, now=T + 10 * GAP) == 1


def test_at_most_once_marks_sent_before_sending_and_never_retries(outbox: Store) -> None:
    channel = Channel()
    outbox.queue_message("charge the card", now=T)
    seen_status: list[set[str]] = []

    def send(batch: Batch) -> None:
        seen_status.append({m.status for m in outbox.outbox_messages()})
        raise ConnectionResetError("reset mid-request")

    assert outbox.dispatch(send, now=T, at_most_once=True) == 0
    assert seen_status == [{"sent"}]  # already recorded as sent while the send was in flight
    [message] = outbox.outbox_messages()
    assert message.status == "failed" and message.error == "ConnectionResetError: reset mid-request"
    assert outbox.dispatch(channel, now=T + GAP) == 0 and channel.sent == []
    outbox.queue_message("next", now=T + GAP)
    assert outbox.dispatch(channel, now=T + GAP, at_most_once=True) == 1
    assert channel.sent[0].bodies == ["next"]


def test_a_dispatcher_that_died_mid_send_is_retried_under_the_same_key(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    with Store.open(db, outbox_gap=GAP, send_timeout=60) as store:
        store.queue_message("deploy finished", now=T)
        store.queue_message("all checks green", now=T)
    dispatcher = spawn("dispatch-hang", db, T, stdin=subprocess.PIPE)
    assert dispatcher.stdout is not None
    in_flight = json.loads(dispatcher.stdout.readline())  # it is inside send() now
    dispatcher.send_signal(signal.SIGKILL)
    dispatcher.communicate(timeout=30)
    assert dispatcher.returncode == -signal.SIGKILL

    channel = Channel()
    with Store.open(db, outbox_gap=GAP, send_timeout=60) as store:
        assert {m.status for m in store.outbox_messages()} == {"sending"}
        assert store.dispatch(channel, now=T + 60) == 0  # its claim is still live: it may yet finish
        assert channel.sent == []
        assert store.next_send_at(now=T + 30) == T + 61  # the first moment it may be taken over
        assert store.dispatch(channel, now=T + 61) == 2
        [batch] = channel.sent
        assert (batch.key, batch.bodies, batch.attempt) == (in_flight["key"], in_flight["bodies"], 2)
        assert {m.status for m in store.outbox_messages()} == {"sent"}


def test_a_message_must_be_text(outbox: Store) -> None:
    for bad in ("", "   ", None, 42):
        with pytest.raises(ValueError, match="non-empty text"):
            outbox.queue_message(bad, now=T)  # type: ignore[arg-type]
    assert outbox.outbox_messages() == []


def test_a_channel_that_never_recovers_is_given_up_on_and_the_lane_moves_again(inbox_target: str) -> None:
    class Down:
        name, at_most_once = "down", False

        def send(self, batch: Batch) -> None:
            raise SendError("connection refused")

    class Local:
        name, at_most_once = "local", False

        def __init__(self) -> None:
            self.keys: list[str] = []

        def send(self, batch: Batch) -> None:
            self.keys.append(batch.key)

    local = Local()
    with Store.open(inbox_target, outbox_gap=0, backoff_base=1, backoff_max=1, backoff_jitter=0,
                    max_send_attempts=3) as store:
        store.queue_message("first", now=0)
        now = 0
        for _ in range(3):
            send_due(store, [local, Down()], now=now)
            now += 10
        first = store.outbox_messages()[0]
        assert first.status == "failed" and first.error == "down: gave up after 3 attempts: connection refused"
        assert len(local.keys) == 1  # the healthy channel got it once, not once per retry
        store.queue_message("second", now=now)
        assert send_due(store, [local], now=now) == 1  # the lane is free again
        assert len(local.keys) == 2


class Recording:
    """A channel that keeps the keys it was sent, and fails while it is down."""

    at_most_once = False

    def __init__(self, name: str, *, down: bool = False) -> None:
        self.name = name
        self.down = down
        self.keys: list[str] = []
        self.tries: list[str] = []

    def send(self, batch: Batch) -> None:
        self.tries.append(batch.key)
        if self.down:
            raise SendError("connection refused")
        self.keys.append(batch.key)


def drain(store: Store, channels: list[Recording], now: int) -> int:
    """Dispatch until nothing more goes at this moment (the engine's dispatcher loops the same way)."""
    sent = 0
    for _ in range(20):
        before = [len(c.tries) for c in channels]
        sent += send_due(store, channels, now=now)
        if [len(c.tries) for c in channels] == before:
            return sent
    raise AssertionError("dispatch kept sending at one moment")


@contextlib.contextmanager
def local_and_phone(inbox_target: str, **options: int) -> Iterator[tuple[Store, Recording, Recording]]:
    """A store whose outbox goes to a channel that works and to a phone that is down."""
    settings = {"backoff_base": 10, "backoff_max": 10, "backoff_jitter": 0, "max_send_attempts": 50, **options}
    with Store.open(inbox_target, **settings) as store:  # type: ignore[arg-type]
        yield store, Recording("local"), Recording("phone", down=True)


def test_a_channel_that_is_down_does_not_hold_the_others_back(inbox_target: str) -> None:
    with local_and_phone(inbox_target, outbox_gap=100) as (store, local, phone):
        channels = [local, phone]
        store.queue_message("first", now=0)
        assert drain(store, channels, 0) == 0  # the phone is down: the batch is not sent to every channel
        store.queue_message("second", now=50)
        assert drain(store, channels, 50) == 0 and len(local.keys) == 1  # the gap counts from the first send
        assert drain(store, channels, 100) == 0
        first, second = local.keys  # one gap later the local channel got the second batch
        assert first != second and phone.keys == []
        assert second not in phone.tries  # the phone still owes the first: it is not sent the second yet
        assert store.deliveries(second) == {"local": ("sent", None)}

        phone.down = False  # back: it gets both, in order, each once
        assert drain(store, channels, 110) == 2
        assert phone.keys == [first, second] and local.keys == [first, second]
        assert {m.body: m.status for m in store.outbox_messages()} == {"first": "sent", "second": "sent"}
        assert store.next_send_at(now=110) is None


def test_waiting_behind_an_earlier_batch_costs_a_channel_no_attempts(inbox_target: str) -> None:
    with local_and_phone(inbox_target, outbox_gap=0, max_send_attempts=3) as (store, local, phone):
        channels = [local, phone]
        store.queue_message("first", now=0)
        drain(store, channels, 0)
        store.queue_message("second", now=1)
        drain(store, channels, 1)
        first, second = local.keys
        for now in range(10, 200, 10):
            drain(store, channels, now)
        # Each batch was tried on the phone exactly max_send_attempts times, the second only after the
        # first was given up on: the time it waited counted for nothing.
        assert phone.tries == [first] * 3 + [second] * 3
        messages = {m.body: m for m in store.outbox_messages()}
        assert messages["second"].status == "failed"
        assert messages["second"].error == "phone: gave up after 3 attempts: connection refused"
        assert local.keys == [first, second]


def test_the_urgent_lane_does_not_wait_behind_held_batches(inbox_target: str) -> None:
    with local_and_phone(inbox_target, outbox_gap=3600) as (store, local, phone):
        channels = [local, phone]
        store.queue_message("weekly summary", now=0)
        drain(store, channels, 0)
        phone.down = False
        store.queue_message("the site is down", now=5, urgent=True)
        assert drain(store, channels, 5) == 1  # the urgent batch goes to the phone before the held retry is due
        assert [m.body for m in store.outbox_messages(status="sent")] == ["the site is down"]
        assert drain(store, channels, 10) == 1  # then the held one, on its retry
        assert len(phone.keys) == 2


def test_the_oldest_queued_message_gives_the_outboxs_lag(store: Store) -> None:
    assert store.oldest_queued_at() is None
    store.queue_message("first", now=1000)
    store.queue_message("second", now=1500)
    assert store.oldest_queued_at() == 1000
    assert store.dispatch(lambda batch: None, now=2000) == 2  # both sent: nothing waits any more
    assert store.oldest_queued_at() is None


def test_send_now_moves_a_held_message_to_the_urgent_lane(outbox: Store) -> None:
    """Issue 21.9: a message held by the gap goes out at once when the owner says so; the gap stays."""
    channel = Channel()
    outbox.queue_message("daily digest", now=T)
    outbox.dispatch(channel, now=T)
    outbox.queue_message("held news", now=T + 10)
    outbox.queue_message("more held news", now=T + 11)
    held, other = (m.id for m in reversed(outbox.outbox_messages(status="queued")))
    assert outbox.next_send_at(now=T + 20) == T + GAP
    assert outbox.send_now(held, now=T + 20)
    assert outbox.next_send_at(now=T + 20) == T + 20
    assert outbox.dispatch(channel, now=T + 20) == 1
    assert channel.sent[-1].bodies == ["held news"] and channel.sent[-1].urgent
    assert outbox.last_send_at() == T  # the other held message still waits for the gap
    assert outbox.dispatch(channel, now=T + 30) == 0
    assert not outbox.send_now(held, now=T + 40)  # sent already: nothing to move
    assert not outbox.send_now(999_999, now=T + 40)
    assert outbox.send_now(other, now=T + 40)
    assert not outbox.send_now(other, now=T + 41)  # urgent already
    assert outbox.dispatch(channel, now=T + 41) == 1 and channel.sent[-1].bodies == ["more held news"]


class Terms:
    """What the outbox plans a channel's send by: a name, and whether it goes at most once."""

    def __init__(self, name: str, *, at_most_once: bool = False) -> None:
        self.name = name
        self.at_most_once = at_most_once


def test_a_send_is_planned_then_each_channels_outcome_recorded(inbox_target: str) -> None:
    channels = [Terms("local"), Terms("pager", at_most_once=True)]
    with Store.open(inbox_target, outbox_gap=0, backoff_base=10, backoff_jitter=0) as store:
        store.queue_message("hello", now=T)
        plan = store.plan_send(channels, now=T)
        assert plan is not None and plan.batch.bodies == ["hello"] and plan.batch.attempt == 1
        assert (plan.send_to, plan.behind, plan.marked) == (("local", "pager"), (), ("pager",))
        key = plan.batch.key
        assert store.deliveries(key) == {"pager": ("sent", None)}  # at most once: marked before its send
        assert store.plan_send(channels, now=T) is None  # claimed: no second plan while the claim stands
        with pytest.raises(ValueError, match="not planned"):
            store.record_send(plan, [ChannelOutcome("elsewhere")], now=T)
        assert store.record_send(plan, [ChannelOutcome("local", "HTTP 503")], now=T, settle=False) == 0
        assert store.outbox_messages()[0].status == "sending"  # not settled until told
        assert store.record_send(plan, [ChannelOutcome("pager", "reset mid-request")], now=T) == 0
        assert store.deliveries(key) == {"local": ("retry", "HTTP 503"), "pager": ("failed", "reset mid-request")}
        assert store.next_send_at(now=T) == T + 10  # retried for the channel that may still take it

        again = store.plan_send(channels, now=T + 10)
        assert again is not None and again.batch.key == key and again.batch.attempt == 2
        assert (again.send_to, again.tries) == (("local",), {"local": 1})  # the pager is never retried
        assert store.record_send(again, [ChannelOutcome("local")], now=T + 10) == 0
        [message] = store.outbox_messages()
        assert message.status == "failed" and message.error == "pager: reset mid-request"


def test_the_give_up_rule_is_the_same_for_one_send_and_for_channels(inbox_target: str) -> None:
    with Store.open(inbox_target, outbox_gap=0, backoff_base=1, backoff_max=1, backoff_jitter=0,
                    max_send_attempts=2) as store:
        store.queue_message("to a service that is gone", now=T)
        down = Channel()
        down.fail_with = SendError("connection refused")
        assert store.dispatch(down, now=T) == 0 and store.dispatch(down, now=T + 10) == 0
        store.queue_message("to a channel that is gone", now=T + 20)
        for now in (T + 20, T + 30):
            plan = store.plan_send([Terms("gone")], now=now)
            assert plan is not None
            store.record_send(plan, [ChannelOutcome("gone", "connection refused")], now=now)
        one, channels = sorted(store.outbox_messages(), key=lambda m: m.id)
        assert (one.status, one.error) == ("failed", "gave up after 2 attempts: connection refused")
        assert (channels.status, channels.error) == ("failed", "gone: gave up after 2 attempts: connection refused")


def test_an_owner_only_message_keeps_its_audience_and_never_answers_its_chat(outbox: Store) -> None:
    """A run's message only the owner may read (it read untrusted content and private data) is stored so: the
    batch says so, a channel that reaches others gets the batch without it, and it answers no chat."""
    from console.core import OWNER_ONLY, OutboxDraft, RunOutcome
    from console.core.mail import MailCursor

    mail = {"kind": "email", "from": {"address": "me@example.org"}, "text": "hi", "trusted": True}
    assert outbox.take_mail("email", MailCursor(1700000000, 7, T), now=T, events=[("1700000000:7", mail)]) == [True]
    gen = outbox.acquire("w", now=T)
    assert gen is not None
    ids = [e.id for e in outbox.claim_batch("w", gen, now=T)]
    secret, hello = OutboxDraft("the notes", True, audience=OWNER_ONLY, answers=False), OutboxDraft("hello")
    assert outbox.finish_run("w", gen, ids, RunOutcome(messages=[secret, hello]), now=T)
    channel = Channel()
    assert outbox.dispatch(channel, now=T) == 2
    [batch] = channel.sent
    assert batch.bodies == ["the notes", "hello"] and batch.audiences == [OWNER_ONLY, None]
    assert batch.reply_tos == [None, "email:1700000000:7"]
    others = batch.for_others()
    assert (others.bodies, others.message_ids, others.key) == (["hello"], batch.message_ids[1:], batch.key)
