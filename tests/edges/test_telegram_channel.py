"""The Telegram channel against a stand-in Bot API on 127.0.0.1, with a real engine on a real inbox file:
cards with an inline keyboard, taps read by long-polling getUpdates from the stored offset, every tap answered,
cards edited to their outcome. What every phone channel's card does (yes, no, expired, a second tap, answers
from elsewhere, an unrecorded card adopted) is the conformance suite's, test_phone_cards.py, run for both."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from console.clock import ManualClock
from console.config import ConfigError
from console.core import Store
from console.edges.answerkey import answer_mac, key_name
from console.edges.channels import build_channels
from console.edges.phone import PhoneChannel
from console.edges.secretfile import load_secrets_file
from console.edges.telegram import TelegramChannel, callback_data, parse_callback
from tests.edges.phone_harness import RISKY, START, performed, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInBotApi
from tests.edges.telegram_harness import ENV, OWNER, TOKEN


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def table(bot: StandInBotApi, **extra: Any) -> dict[str, Any]:
    return {"type": "telegram", "token_env": "TG_TEST_TOKEN", "chat_id": OWNER, "api_base": bot.url, **extra}


def quick(channel: PhoneChannel) -> None:
    assert isinstance(channel, TelegramChannel)
    channel.poll_seconds = 1  # long polls that end soon, so a stopping engine is not kept waiting


async def ask(engine: Any, bot: StandInBotApi, source_id: str = "c1") -> tuple[str, dict[str, Any]]:
    await engine.ingest("chat", source_id, RISKY)
    [approval] = await stored(engine, lambda s: [a for a in s.pending_approvals()
                                                 if a.event_id == s.find_event("chat", source_id).id],
                              "the approval")
    card = await until(lambda: next((m for m in bot.cards(OWNER) if approval.request_id in m["text"]), None),
                       "the card in the chat")
    return approval.request_id, copy.deepcopy(card)  # as the phone first showed it, buttons and all


def text_of(bot: StandInBotApi, card: dict[str, Any]) -> str:
    message = bot.message(OWNER, card["message_id"])
    assert message is not None
    return str(message["text"])


async def test_every_tap_is_answered_on_the_phone(tmp_path: Path, clock: ManualClock, bot: StandInBotApi) -> None:
    async with running(phone_settings(tmp_path, table(bot), approval_expiry=60), clock, ENV, tune=quick) as engine:
        _, first = await ask(engine, bot, "c1")
        _, second = await ask(engine, bot, "c2")
        taps = [await bot.tap(OWNER, first, "Yes"), await bot.tap(OWNER, second, "No")]
        await until(lambda: all(bot.reply_to(t) for t in taps), "both taps answered")
        taps.append(await bot.tap(OWNER, first, "No"))  # a second phone, or a tap before the edit arrived
        await until(lambda: bot.reply_to(taps[-1]), "the second tap answered")
        _, late = await ask(engine, bot, "c3")
        clock.advance(61)
        taps.append(await bot.tap(OWNER, late, "Yes"))
        await until(lambda: bot.reply_to(taps[-1]), "the late tap answered")
        assert [bot.reply_to(t) for t in taps] == ["Approved", "Declined", "Already answered: yes", "Expired"]


async def test_a_forged_button_and_a_wrong_chat_change_nothing_and_are_counted(
    tmp_path: Path, clock: ManualClock, bot: StandInBotApi
) -> None:
    async with running(phone_settings(tmp_path, table(bot)), clock, ENV, tune=quick) as engine:
        request_id, card = await ask(engine, bot)
        yes = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        taps = [
            await bot.tap(OWNER, card, "Yes", data=f"y|{request_id}|AAAAAAAAAAAAAAAA"),      # a made-up MAC
            await bot.tap(OWNER, card, "Yes", data=yes.replace("y|", "n|", 1)),              # No under Yes's MAC
            await bot.tap(OWNER, card, "Yes", data="approve everything"),                   # not ours at all
            await bot.tap(OWNER, card, "Yes", from_id=777),                                  # someone else
            await bot.tap(999, card, "Yes"),                                                 # another chat
        ]
        await until(lambda: all(bot.reply_to(t) for t in taps), "every tap answered")
        assert [bot.reply_to(t) for t in taps] == [
            "Not accepted: this button is not from this agent"] * 3 + [
            "Not accepted: only the owner's chat may answer"] * 2
        counts = await engine.read(lambda s: s.phone_answer_counts())
        assert {k: v for k, v in counts.items() if v} == {"forged": 3, "wrong_chat": 2}
        assert await engine.read(lambda s: (s.approval(request_id).outcome, s.find_event("approval", request_id))) == (
            None, None)
        assert bot.message(OWNER, card["message_id"])["reply_markup"] is not None  # type: ignore[index]
        real = await bot.tap(OWNER, card, "No")
        await until(lambda: bot.reply_to(real) == "Declined", "a real tap still works")


async def test_an_engine_restarted_between_the_tap_and_its_delivery_settles_it_exactly_once(
    tmp_path: Path, clock: ManualClock, bot: StandInBotApi
) -> None:
    settings = phone_settings(tmp_path, table(bot))
    async with running(settings, clock, ENV, holder="first", tune=quick) as engine:
        request_id, card = await ask(engine, bot)
    tap = await bot.tap(OWNER, card, "Yes")  # nobody is polling: the Bot API keeps the update
    for holder in ("second", "third"):
        async with running(settings, clock, ENV, holder=holder, tune=quick) as engine:
            await stored(engine, lambda s: s.approval(request_id).outcome == "yes", "the tap read on restart")
            await stored(engine, lambda s: performed(s, request_id) == 1, "the action")
            await until(lambda: text_of(bot, card).endswith("Approved (from Telegram)"), "the card")
            polls = len([r for r in bot.requests if r.path.endswith("/getUpdates")])
            await until(lambda: len([r for r in bot.requests if r.path.endswith("/getUpdates")]) > polls,  # noqa: B023
                        "another poll")
    last_poll = [r for r in bot.requests if r.path.endswith("/getUpdates")][-1]
    assert json.loads(last_poll.body)["offset"] == tap.update_id + 1
    with Store.open(settings.db) as store:
        assert [(a["verdict"], a["repeats"]) for a in store.phone_answers()] == [("settled", 0)]
        assert performed(store, request_id) == 1
    assert [a["text"] for a in bot.callback_answers] == ["Approved"]  # the tap answered once


async def test_the_expiry_edits_the_card(tmp_path: Path, clock: ManualClock, bot: StandInBotApi) -> None:
    async with running(phone_settings(tmp_path, table(bot), approval_expiry=60), clock, ENV, tune=quick) as engine:
        request_id, card = await ask(engine, bot)
        clock.advance(61)
        engine.wake()
        await until(lambda: text_of(bot, card).endswith("\n\nExpired"), "Expired on the card")
        assert await engine.read(lambda s: s.approval(request_id).answered_via) == "expiry"


async def test_a_bot_api_that_fails_holds_back_only_the_telegram_channel(
    tmp_path: Path, clock: ManualClock, bot: StandInBotApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    log = tmp_path / "outbox.jsonl"
    settings = phone_settings(tmp_path, table(bot))
    settings.channels.append({"type": "file", "path": str(log)})
    bot.failures = {"sendMessage": [502], "getUpdates": [502, 502]}
    async with running(settings, clock, ENV, tune=quick) as engine:
        await engine.ingest("chat", "c1", RISKY)
        await until(lambda: log.exists() and "Approval needed" in log.read_text(), "the file channel's copy")
        assert bot.cards(OWNER) == []
        clock.advance(10)
        engine.wake()
        [card] = await until(lambda: bot.cards(OWNER), "the card after the retry")
        tap = await bot.tap(OWNER, card, "Yes")  # the poller got past its failures on its own
        await until(lambda: bot.reply_to(tap) == "Approved", "the tap")
        [announcement] = await engine.read(lambda s: [m for m in s.outbox_messages() if m.approval_id])
        deliveries = await engine.read(lambda s: s.deliveries(announcement.batch_key))
    assert deliveries["file"] == ("sent", None) and deliveries["telegram"] == ("sent", None)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "getUpdates: 502" in logged and TOKEN not in logged
    inbox = b"".join(p.read_bytes() for p in tmp_path.glob("inbox.db*"))
    assert TOKEN.encode() not in inbox
    for request in bot.requests:
        assert TOKEN not in request.body.decode()


async def test_a_message_on_its_way_to_the_phone_holds_no_thread(tmp_path: Path, clock: ManualClock) -> None:
    """The dispatcher awaits the phone channel on the engine's loop: while the Bot API has not answered, the
    sender thread (where the outbox's books are kept and blocking channels send) is free, not waiting for it."""
    held = HeldBotApi(token=TOKEN)
    await held.start()
    try:
        async with running(phone_settings(tmp_path, table(held)), clock, ENV, tune=quick) as engine:
            await engine.write(lambda s: s.queue_message("the deploy finished", now=clock.now(), urgent=True))
            await until(held.holding.is_set, "sendMessage reaching the Bot API")
            in_flight = await asyncio.wait_for(engine.on("sender", lambda s: s.outbox_counts()["sending"]), 10)
            assert in_flight == 1  # the sender thread answered while the phone's send was still under way
            held.release.set()
            await stored(engine, lambda s: s.outbox_counts()["sent"] == 1, "the message recorded as sent")
            assert [m["text"] for m in held.chats[OWNER]] == ["the deploy finished"]
    finally:
        await held.stop()


async def test_a_retried_batch_skips_what_already_reached_the_phone(tmp_path: Path, clock: ManualClock) -> None:
    bot = FailsOnce(token=TOKEN, failing="second")
    await bot.start()
    try:
        async with running(phone_settings(tmp_path, table(bot)), clock, ENV, tune=quick) as engine:
            await engine.write(lambda s: [s.queue_message(text, now=clock.now()) for text in ("first", "second")])
            await stored(engine, lambda s: s.outbox_counts()["retrying"] == 1, "the batch waiting for its retry")
            assert [m["text"] for m in bot.chats[OWNER]] == ["first"]
            clock.advance(10)
            engine.wake()
            await stored(engine, lambda s: s.outbox_counts()["sent"] == 2, "the batch sent on its retry")
            [batch] = {m.batch_key for m in await engine.read(lambda s: s.outbox_messages())}
            attempts = await engine.read(lambda s: s.deliveries(str(batch)))
        assert [m["text"] for m in bot.chats[OWNER]] == ["first", "second"]  # the first one reached it once
        assert attempts == {"console": ("sent", None), "telegram": ("sent", None)}
    finally:
        await bot.stop()


@dataclass
class FailsOnce(StandInBotApi):
    """The stand-in Bot API, failing the first sendMessage of one text with a 502."""

    failing: str = ""

    async def _send(self, payload: dict[str, Any]) -> web.Response:
        if payload["text"] == self.failing:
            self.failing = ""
            return self._error(502, "Bad Gateway")
        return await super()._send(payload)


@dataclass
class HeldBotApi(StandInBotApi):
    """The stand-in Bot API, holding every sendMessage until released."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def _send(self, payload: dict[str, Any]) -> web.Response:
        self.holding.set()
        await self.release.wait()
        return await super()._send(payload)


def test_callback_data_fits_telegram_and_parses_back(tmp_path: Path) -> None:
    settings = phone_settings(tmp_path, {})
    store = Store.open(settings.db)
    tag = store.inbox_tag()
    store.close()
    (tmp_path / "secrets.env").write_text(f"{key_name(tag)}={'ab' * 32}\n")
    key = load_secrets_file_checked(tmp_path / "secrets.env")[key_name(tag)]
    mac = answer_mac(key, "telegram", tag, "apr-123456789-0a1b2c3d", "yes", 12)
    data = callback_data("yes", "apr-123456789-0a1b2c3d", mac)
    assert data is not None and len(data.encode()) <= 64
    assert parse_callback(data) == ("apr-123456789-0a1b2c3d", "yes", mac)
    assert callback_data("no", "x" * 60, mac) is None
    assert parse_callback("maybe|apr-1|mac") is None and parse_callback("y||mac") is None


def load_secrets_file_checked(path: Path) -> Any:
    path.chmod(0o600)
    return load_secrets_file(path)


def test_bad_telegram_settings_are_one_line_errors(tmp_path: Path) -> None:
    cases = [
        ({"type": "telegram", "chat_id": 1}, {}, "channels[0].token_env: missing"),
        ({"type": "telegram", "chat_id": 1, "token_env": "TG"}, {}, "channels[0].token_env: the secret TG is not set"),
        ({"type": "telegram", "token_env": "TG", "chat_id": 0}, {"TG": "x"},
         "channels[0].chat_id: expected the owner's chat id"),
        ({"type": "telegram", "token_env": "TG", "batch_window": -1}, {"TG": "x"}, "channels[0].batch_window"),
        ({"type": "telegram", "token_env": "TG", "chat_id": "me"}, {"TG": "x"}, "channels[0].chat_id"),
        ({"type": "telegram", "token_env": "TG", "chat_id": 1, "api_base": "nope"}, {"TG": "x"},
         "channels[0].api_base: expected an http"),
        ({"type": "telegram", "token_env": "TG", "chat_id": 1, "topic": "t"}, {"TG": "x"},
         "channels[0].topic: unknown setting for a telegram channel"),
    ]
    for raw, env, message in cases:
        with pytest.raises(ConfigError) as caught:
            build_channels(phone_settings(tmp_path, raw), environ=env)
        assert message in str(caught.value) and "\n" not in str(caught.value)
    [_, channel] = build_channels(phone_settings(tmp_path, {"type": "telegram", "token_env": "TG",
                                                            "chat_id": "-100123"}), environ={"TG": "x"})
    assert isinstance(channel, TelegramChannel) and channel.chat_id == -100123
    assert "x" not in repr(vars(channel).get("_token"))
