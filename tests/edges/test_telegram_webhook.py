"""Telegram's webhook mode (issue 20): the receiver takes updates at /telegram with the secret header (constant
time), keeps each under its update id before the 200, and the engine takes them as it takes getUpdates' (same
keys, replies, pairing), never polling; `agent-console telegram webhook --url/--delete` against the stand-in."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from console.assembly import receiver_beside
from console.clock import ManualClock
from console.edges.phone_config import telegram_webhook
from console.edges.telegram_webhook import SECRET_HEADER
from tests.cli.helpers import assert_user_error, invoke
from tests.edges.phone_harness import START, phone_settings, running, stored, until
from tests.edges.phone_standins import StandInBotApi
from tests.edges.telegram_harness import OWNER, TOKEN
from tests.edges.test_telegram_chat import quick

SECRET = "hook-secret_0123456789"


def update(update_id: int, message_id: int, text: str, chat: int = OWNER) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": message_id, "date": START, "text": text, "from": {"id": chat, "is_bot": False, "first_name": "O"},
        "chat": {"id": chat, "type": "private"}}}


async def test_updates_posted_with_the_secret_are_kept_once_and_answered(tmp_path: Path, bot: StandInBotApi,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_HOOK_SECRET", SECRET)
    env = {"TG_TEST_TOKEN": TOKEN, "TG_HOOK_SECRET": SECRET}
    channel = {"type": "telegram", "token_env": "TG_TEST_TOKEN", "api_base": bot.url, "chat_id": OWNER,
               "batch_window": 0, "webhook_secret_env": "TG_HOOK_SECRET"}
    settings = phone_settings(tmp_path, channel, webhooks={"secrets_file": str(tmp_path / "secrets.env"),
                                                          "host": "127.0.0.1", "port": 0})
    clock = ManualClock(START)
    async with running(settings, clock, env, tune=quick) as engine:
        receiver = receiver_beside(settings, engine)
        await receiver.start()
        try:
            async with aiohttp.ClientSession() as http:
                async def post(body: Any, secret: str | None) -> tuple[int, Any]:
                    headers = {} if secret is None else {SECRET_HEADER: secret}
                    async with http.post(f"{receiver.url}/telegram", data=json.dumps(body).encode(),
                                         headers=headers) as response:
                        return response.status, await response.json()

                assert (await post(update(900, 31, "forged"), None))[0] == 401
                assert (await post(update(900, 31, "forged"), SECRET[:-1] + "x"))[0] == 401
                assert (await post({"no": "update id"}, SECRET))[0] == 400
                assert await post(update(901, 32, "hello by webhook"), SECRET) == (200, {})
                assert await post(update(901, 32, "hello by webhook"), SECRET) == (200, {})  # Telegram's retry
                event = await stored(engine, lambda s: s.find_event("telegram", f"{OWNER}:32"), "the event")
                assert event.payload["owner"] is True and event.duplicates == 0
                [reply] = await until(lambda: [m for m in bot.sent_to(OWNER) if m["text"].startswith("Noted")],
                                      "the reply")
                assert reply["reply_to_message_id"] == 32
                await stored(engine, lambda s: s.phone_cursor("telegram") == "902", "the cursor past it")
                await stored(engine, lambda s: s.chat_updates("telegram", from_id=0) == [], "kept update forgotten")
                # Telegram may retry after the listener took the update and forgot it (seen under load when the
                # retry above came that late): a redelivery still, not kept where the listener never reads again.
                assert await post(update(901, 32, "hello by webhook"), SECRET) == (200, {})
                assert await engine.read(lambda s: s.chat_updates("telegram", from_id=0)) == []
                assert await engine.read(lambda s: s.find_event("telegram", f"{OWNER}:31")) is None
            assert receiver.counts["unauthorized"] == 2 and receiver.counts["duplicate"] == 2
            assert not [r for r in bot.requests if r.path.endswith("/getUpdates")]  # never polled
        finally:
            await receiver.stop()


async def test_the_webhook_command_sets_and_deletes_it(tmp_path: Path, bot: StandInBotApi,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[[channels]]\ntype = "telegram"\ntoken_env = "TG_TEST_TOKEN"\napi_base = "{bot.url}"\n'
                      f'webhook_secret_env = "TG_HOOK_SECRET"\n')
    monkeypatch.setenv("TG_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("TG_HOOK_SECRET", SECRET)
    base = ["--config", str(config), "--db", str(tmp_path / "inbox.db"), "telegram", "webhook"]
    # The command is synchronous: it runs off this loop, which serves the stand-in.
    result = await asyncio.to_thread(invoke, [*base, "--url", "https://agent.example.net/telegram"])
    assert result.exit_code == 0, result.output
    [call] = [json.loads(r.body) for r in bot.requests if r.path.endswith("/setWebhook")]
    assert call == {"url": "https://agent.example.net/telegram", "secret_token": SECRET,
                    "allowed_updates": ["message", "edited_message", "callback_query"]}
    assert (await asyncio.to_thread(invoke, [*base, "--delete"])).exit_code == 0
    assert [r for r in bot.requests if r.path.endswith("/deleteWebhook")]
    wrong = invoke([*base])
    assert_user_error(wrong.exit_code, wrong.stdout, wrong.stderr, "--url URL, or --delete")
    monkeypatch.setenv("TG_TEST_TOKEN", "123456:revoked")
    refused = await asyncio.to_thread(invoke, [*base, "--url", "https://agent.example.net/telegram"])
    line = assert_user_error(refused.exit_code, refused.stdout, refused.stderr, "setWebhook: 401")
    assert "revoked" not in line


def test_the_receiver_reads_the_cursor_of_the_channel_it_serves(tmp_path: Path) -> None:
    channel = {"type": "telegram", "name": "tg-home", "token_env": "TG_TEST_TOKEN", "chat_id": OWNER,
               "webhook_secret_env": "TG_HOOK_SECRET"}
    webhook = telegram_webhook(phone_settings(tmp_path, channel), {"TG_TEST_TOKEN": TOKEN, "TG_HOOK_SECRET": SECRET})
    assert webhook is not None and webhook.channel == "tg-home" and webhook.source == "telegram"
