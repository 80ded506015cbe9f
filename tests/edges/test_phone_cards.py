"""The phone channels' one conformance suite: what an approval card does is the same on ntfy and on Telegram, so
each test here runs once per channel, a real engine on a real inbox file against the channel's stand-in on
127.0.0.1 (tests/edges/phone_standins.py). What only one channel does (ntfy's signed http actions and its stream,
Telegram's callback data, getUpdates offsets and answerCallbackQuery) is checked through each channel's
check_question / check_answered here and otherwise stays in test_ntfy_channel.py and
test_telegram_channel.py."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from console.clock import ManualClock
from console.core import Store
from console.edges.phone import PhoneChannel
from console.edges.telegram import TelegramChannel
from tests.edges.phone_harness import RISKY, START, performed, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInBotApi, StandInNtfy, Tap, is_card

NTFY_TOKEN = "tk_stand_in_token_0123456789"
BOT_TOKEN = "123456:stand-in-token-AAbbCC"
OWNER = 424242


class Phone(Protocol):
    """A phone channel as its owner sees it: the cards on the phone, and the buttons under them."""

    name: str  # the channel's name, as approvals.answered_via records it
    label: str  # how a card names it: "Approved (from <label>)"
    env: dict[str, str]

    def table(self) -> dict[str, Any]: ...
    def tune(self, channel: PhoneChannel) -> None: ...
    def card(self, request_id: str) -> dict[str, Any] | None: ...
    async def tap(self, card: dict[str, Any], label: str) -> Any: ...
    def check_question(self, card: dict[str, Any], request_id: str) -> None: ...  # the channel's own form
    async def check_answered(self, engine: Any, card: dict[str, Any], tapped: Any) -> None: ...  # after a Yes
    def text(self, card: dict[str, Any]) -> str: ...
    def asks(self, card: dict[str, Any]) -> bool: ...
    def changes(self, card: dict[str, Any]) -> int: ...
    def cards_sent(self) -> int: ...
    def ref(self, card: dict[str, Any]) -> str: ...


class NtfyPhone:
    name, label, env = "ntfy", "ntfy", {"NTFY_TEST_TOKEN": NTFY_TOKEN}

    def __init__(self, server: StandInNtfy) -> None:
        self.server = server

    def table(self) -> dict[str, Any]:
        return {"type": "ntfy", "server": self.server.url, "topic": "agent", "token_env": "NTFY_TEST_TOKEN"}

    def tune(self, channel: PhoneChannel) -> None:
        pass

    def card(self, request_id: str) -> dict[str, Any] | None:
        return next((m for m in self.server.cards("agent") if request_id in m["message"]), None)

    async def tap(self, card: dict[str, Any], label: str) -> int:
        return await self.server.tap(card, label)

    def check_question(self, card: dict[str, Any], request_id: str) -> None:
        assert [a["label"] for a in card["actions"]] == ["Yes", "No"]
        assert all(a["action"] == "http" and a["url"] == f"{self.server.url}/agent-answers" for a in card["actions"])
        assert card["priority"] == 4

    async def check_answered(self, engine: Any, card: dict[str, Any], tapped: Any) -> None:
        assert tapped == 200  # the http action went through as the phone sends it (no token)
        assert self.server.shown("agent")[card["sequence_id"]]["priority"] == 2

    def text(self, card: dict[str, Any]) -> str:
        return str(self.server.shown("agent")[card["sequence_id"]]["message"])

    def asks(self, card: dict[str, Any]) -> bool:
        return "actions" in self.server.shown("agent")[card["sequence_id"]]

    def changes(self, card: dict[str, Any]) -> int:
        return len([m for m in self.server.messages if m.get("sequence_id") == card["sequence_id"]]) - 1

    def cards_sent(self) -> int:
        return len({m["sequence_id"] for m in self.server.messages if m["topic"] == "agent"
                    and is_card(m.get("message", ""))})

    def ref(self, card: dict[str, Any]) -> str:
        return str(card["sequence_id"])


class TelegramPhone:
    name, label, env = "telegram", "Telegram", {"TG_TEST_TOKEN": BOT_TOKEN}

    def __init__(self, server: StandInBotApi) -> None:
        self.server = server

    def table(self) -> dict[str, Any]:
        return {"type": "telegram", "token_env": "TG_TEST_TOKEN", "chat_id": OWNER, "api_base": self.server.url}

    def tune(self, channel: PhoneChannel) -> None:
        assert isinstance(channel, TelegramChannel)
        channel.poll_seconds = 1  # long polls that end soon, so a stopping engine is not kept waiting

    def card(self, request_id: str) -> dict[str, Any] | None:
        found = next((m for m in self.server.cards(OWNER) if request_id in m["text"]), None)
        return copy.deepcopy(found)  # as the phone first showed it, buttons and all

    async def tap(self, card: dict[str, Any], label: str) -> Tap:
        return await self.server.tap(OWNER, card, label)

    def check_question(self, card: dict[str, Any], request_id: str) -> None:
        buttons = card["reply_markup"]["inline_keyboard"][0]
        assert [b["text"] for b in buttons] == ["Yes", "No"]
        assert all(len(b["callback_data"].encode()) <= 64 and request_id in b["callback_data"] for b in buttons)

    async def check_answered(self, engine: Any, card: dict[str, Any], tapped: Any) -> None:
        await until(lambda: self.server.reply_to(tapped) == "Approved", "the tap answered")
        await stored(engine, lambda s: s.phone_cursor("telegram") == str(tapped.update_id + 1), "the offset stored")

    def message(self, card: dict[str, Any]) -> dict[str, Any]:
        message = self.server.message(OWNER, card["message_id"])
        assert message is not None
        return message

    def text(self, card: dict[str, Any]) -> str:
        return str(self.message(card)["text"])

    def asks(self, card: dict[str, Any]) -> bool:
        return self.message(card)["reply_markup"] is not None

    def changes(self, card: dict[str, Any]) -> int:
        return int(self.message(card)["edits"])

    def cards_sent(self) -> int:
        return len(self.server.cards(OWNER))

    def ref(self, card: dict[str, Any]) -> str:
        return f"{OWNER}:{card['message_id']}"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture(params=["ntfy", "telegram"])
async def phone(request: pytest.FixtureRequest, clock: ManualClock) -> AsyncIterator[Phone]:
    server: StandInNtfy | StandInBotApi
    if request.param == "ntfy":
        server = StandInNtfy(clock.now, token=NTFY_TOKEN, protected=("agent",))
    else:
        server = StandInBotApi(token=BOT_TOKEN)
    await server.start()
    try:
        yield NtfyPhone(server) if isinstance(server, StandInNtfy) else TelegramPhone(server)
    finally:
        await server.stop()


def engine_for(phone: Phone, tmp_path: Path, clock: ManualClock, **overrides: Any) -> Any:
    return running(phone_settings(tmp_path, phone.table(), **overrides), clock, phone.env, tune=phone.tune)


async def ask(engine: Any, phone: Phone, source_id: str = "c1") -> tuple[str, dict[str, Any]]:
    """A risky chat message; returns its request id and its card as the phone first showed it."""
    await engine.ingest("chat", source_id, RISKY)
    [approval] = await stored(engine, lambda s: [a for a in s.pending_approvals()
                                                 if a.event_id == s.find_event("chat", source_id).id],
                              "the approval")
    card = await until(lambda: phone.card(approval.request_id), "the card on the phone")
    return approval.request_id, card


async def test_yes_settles_once_and_the_card_says_approved(tmp_path: Path, clock: ManualClock, phone: Phone) -> None:
    async with engine_for(phone, tmp_path, clock) as engine:
        request_id, card = await ask(engine, phone)
        origin, opening = phone.text(card).split("\n")[:2]  # the origin line first (issue 31)
        assert origin == "asked by a run from your chat #1" and opening.startswith(f"Approval needed [{request_id}]")
        assert phone.asks(card)
        phone.check_question(card, request_id)
        tapped = await phone.tap(card, "Yes")
        await until(lambda: phone.text(card).endswith(f"\n\nApproved (from {phone.label})"), "the card changed")
        assert phone.text(card).startswith(card.get("message", card.get("text")))  # the question kept above
        assert not phone.asks(card)  # the buttons went with the question
        await phone.check_answered(engine, card, tapped)
        await stored(engine, lambda s: performed(s, request_id) == 1, "the action performed")
        approval = await engine.read(lambda s: s.approval(request_id))
        assert (approval.outcome, approval.answered_via) == ("yes", phone.name)
        counts = await engine.read(lambda s: s.status(now=clock.now())["phone_answers"])
        assert counts["settled"] == 1 and sum(counts.values()) == 1


async def test_no_declines(tmp_path: Path, clock: ManualClock, phone: Phone) -> None:
    async with engine_for(phone, tmp_path, clock) as engine:
        request_id, card = await ask(engine, phone)
        await phone.tap(card, "No")
        await until(lambda: phone.text(card).endswith(f"\n\nDeclined (from {phone.label})"), "Declined on the card")
        await stored(engine, lambda s: s.counts()["done"] == 2, "the answer's run")
        assert await engine.read(lambda s: (s.approval(request_id).outcome, performed(s, request_id))) == ("no", 0)


async def test_a_tap_after_the_deadline_shows_expired(tmp_path: Path, clock: ManualClock, phone: Phone) -> None:
    async with engine_for(phone, tmp_path, clock, approval_expiry=60) as engine:
        request_id, card = await ask(engine, phone)
        clock.advance(61)
        await phone.tap(card, "Yes")
        await until(lambda: phone.text(card).endswith("\n\nExpired"), "Expired on the card")
        await stored(engine, lambda s: s.counts()["done"] == 2, "the answer's run")
        assert await engine.read(lambda s: (s.approval(request_id).outcome, performed(s, request_id))) == (
            "expired", 0)


async def test_a_second_tap_shows_the_first_outcome(tmp_path: Path, clock: ManualClock, phone: Phone) -> None:
    async with engine_for(phone, tmp_path, clock) as engine:
        request_id, card = await ask(engine, phone)
        await phone.tap(card, "Yes")
        await until(lambda: phone.text(card).endswith(f"Approved (from {phone.label})"), "Approved")
        await phone.tap(card, "No")  # a second phone, or a tap on the buttons before the card changed
        await until(lambda: phone.text(card).endswith("\n\nAlready answered: yes"), "Already answered on the card")
        await stored(engine, lambda s: performed(s, request_id) == 1, "the action")
        counts = await engine.read(lambda s: s.phone_answer_counts())
        assert (counts["settled"], counts["already_answered"]) == (1, 1)
        assert await engine.read(lambda s: s.approval(request_id).outcome) == "yes"


async def test_a_yes_sent_after_the_owner_said_no_changes_nothing(tmp_path: Path, clock: ManualClock,
                                                                  phone: Phone) -> None:
    async with engine_for(phone, tmp_path, clock) as engine:
        request_id, card = await ask(engine, phone)
        await phone.tap(card, "No")
        await stored(engine, lambda s: s.approval(request_id).outcome == "no", "the answer")
        await phone.tap(card, "Yes")  # the Yes button's answer, captured or kept on the phone, sent afterwards
        await stored(engine, lambda s: s.phone_answer_counts()["already_answered"] == 1, "the late Yes taken")
        await stored(engine, lambda s: s.counts()["done"] == 2, "the answer's run")
        assert (await engine.read(lambda s: s.phone_answer_counts()))["settled"] == 1
        assert await engine.read(lambda s: (s.approval(request_id).outcome, performed(s, request_id))) == ("no", 0)


async def test_the_card_changes_when_the_console_or_the_cli_answers(tmp_path: Path, clock: ManualClock,
                                                                    phone: Phone) -> None:
    settings = phone_settings(tmp_path, phone.table())
    async with running(settings, clock, phone.env, tune=phone.tune) as engine:
        first, first_card = await ask(engine, phone, "c1")
        second, second_card = await ask(engine, phone, "c2")
        assert await engine.answer(first, "yes") == "yes"
        await until(lambda: phone.text(first_card).endswith("Approved (in the console)"), "the console's answer")
        with Store.open(settings.db) as other_process:
            assert other_process.answer_approval(second, "no", now=clock.now(), via="cli") == "no"
        await until(lambda: phone.text(second_card).endswith("Declined (from the command line)"), "the CLI's answer")
        for card in (first_card, second_card):
            assert not phone.asks(card) and phone.changes(card) == 1


async def test_a_card_the_engine_failed_to_record_is_adopted_by_its_answer_and_never_sent_twice(
    tmp_path: Path, clock: ManualClock, phone: Phone, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The phone service took the card, then the engine failed before recording it (a crash, a full disk): the
    # batch is retried later. The owner's answer on that card must still settle, change it, and stop the retry
    # sending it again.
    real = Store.record_phone_message
    failures = []

    def lose_the_first(store: Store, *args: Any, **kwargs: Any) -> None:
        if not failures:
            failures.append(args)
            raise OSError("disk full")
        real(store, *args, **kwargs)

    monkeypatch.setattr(Store, "record_phone_message", lose_the_first)
    async with engine_for(phone, tmp_path, clock) as engine:
        request_id, card = await ask(engine, phone)
        await stored(engine, lambda s: s.outbox_counts()["retrying"] == 1, "the batch waiting to retry")
        await phone.tap(card, "Yes")
        await until(lambda: phone.text(card).endswith(f"Approved (from {phone.label})"), "the adopted card changed")
        clock.advance(30)
        engine.wake()
        await stored(engine, lambda s: s.outbox_counts()["retrying"] == 0 and s.counts()["done"] == 2,
                     "the retry done")
        [announcement] = await engine.read(lambda s: [m for m in s.outbox_messages() if m.approval_id == request_id])
        assert await engine.read(lambda s: s.phone_sent_ref(phone.name, announcement.id)) == phone.ref(card)
        assert await engine.read(lambda s: (s.approval(request_id).outcome, performed(s, request_id))) == ("yes", 1)
    assert failures and phone.cards_sent() == 1 and phone.changes(card) == 1
