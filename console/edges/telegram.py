"""The Telegram channel: messages to the owner's chat through the Bot API; approval cards with an inline
keyboard (Yes / No); taps read back by long-polling getUpdates. No open port is needed on this machine.

    [[channels]]
    type = "telegram"
    token_env = "TELEGRAM_BOT_TOKEN"    # the bot's token, from the environment or the secrets file
    chat_id = 123456789                 # the owner's chat: taps from any other chat are refused
    api_base = "https://api.telegram.org"   # default; a test server in tests

Four Bot API methods are used: sendMessage, editMessageText, getUpdates and answerCallbackQuery, each one JSON
POST. They are called with aiohttp directly rather than through python-telegram-bot: that library brings its
own HTTP stack (httpx) and its own update loop, whose offset lives in memory, while here the offset must be
stored in the inbox with each answer; four calls are smaller written out than adapted.

A button's callback_data is "<y|n>|<request id>|<MAC>" (at most 64 bytes, Telegram's limit): a MAC of 12 bytes
over the request and the answer, with this inbox's key. The Bot API puts the token in the URL's path; it is
kept out of every error, log line and message (errors are worded without the URL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from console.core import Approval, PhoneCard, SendError
from console.edges.phone import PhoneChannel, describe, read_json, shorten, tap_reply
from console.edges.secretfile import Secret

DEFAULT_API_BASE = "https://api.telegram.org"
TEXT_LIMIT = 4000          # Telegram takes 4096 characters of text
CALLBACK_LIMIT = 64        # bytes of callback_data
DEFAULT_POLL = 30          # seconds a getUpdates call waits for an update
ANSWER_WORDS = {"y": "yes", "n": "no"}


def callback_data(answer: str, request_id: str, mac: str) -> str | None:
    """The button's data, or None when it would not fit in Telegram's 64 bytes (a very long request id)."""
    data = f"{answer[0]}|{request_id}|{mac}"
    return data if len(data.encode("utf-8")) <= CALLBACK_LIMIT else None


def parse_callback(data: str) -> tuple[str, str, str] | None:
    """(request id, answer, mac) from a button's data, or None if it is not one of ours."""
    word, _, rest = data.partition("|")
    request_id, _, mac = rest.rpartition("|")
    if word not in ANSWER_WORDS or not request_id or not mac:
        return None
    return request_id, ANSWER_WORDS[word], mac


class TelegramChannel(PhoneChannel):
    kind: ClassVar[str] = "telegram"
    mac_bytes: ClassVar[int] = 12

    def __init__(
        self, *, name: str, token: Secret, chat_id: int, api_base: str, secrets_file: Path, timeout: float,
        poll_seconds: int = DEFAULT_POLL, at_most_once: bool = False,
    ) -> None:
        super().__init__(name, secrets_file=secrets_file, timeout=timeout, at_most_once=at_most_once)
        self.chat_id = chat_id
        self.api_base = api_base.rstrip("/")
        self.poll_seconds = poll_seconds
        self._token = token

    async def call(self, method: str, payload: dict[str, Any], *, timeout: float | None = None) -> Any:
        """One Bot API method; its result, or SendError worded without the URL (it holds the token)."""
        url = f"{self.api_base}/bot{self._token.reveal()}/{method}"
        try:
            async with self.session.post(url, json=payload, timeout=aiohttp.ClientTimeout(
                    total=timeout or self.timeout)) as response:
                body = await read_json(response)
        except SendError as exc:
            raise SendError(f"{self.name}: {method}: {exc}", permanent=False) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SendError(f"{self.name}: {method}: {describe(exc)}", permanent=False) from None
        if isinstance(body, dict) and body.get("ok") is True:
            return body.get("result")
        code = body.get("error_code", response.status) if isinstance(body, dict) else response.status
        description = str(body.get("description", "")) if isinstance(body, dict) else ""
        code = int(code) if isinstance(code, int) else response.status
        raise SendError(f"{self.name}: {method}: {code} {description}".rstrip(),
                        permanent=code < 500 and code != 429 and code != 409)

    # --- sending --------------------------------------------------------------------------------
    def _ref(self, result: Any) -> str:
        if not isinstance(result, dict) or not isinstance(result.get("message_id"), int):
            raise SendError(f"{self.name}: sendMessage answered without a message id", permanent=False)
        return f"{self.chat_id}:{result['message_id']}"

    async def post(self, text: str, *, slot: str, urgent: bool) -> str:
        return self._ref(await self.call("sendMessage", {
            "chat_id": self.chat_id, "text": shorten(text, TEXT_LIMIT), "disable_notification": not urgent}))

    async def post_card(self, body: str, approval: Approval, *, slot: str) -> str:
        buttons = [(label, callback_data(word, approval.request_id, self.mac(approval.request_id, word)))
                   for label, word in (("Yes", "yes"), ("No", "no"))]
        payload: dict[str, Any] = {"chat_id": self.chat_id, "text": shorten(body, TEXT_LIMIT)}
        if all(data is not None for _, data in buttons):
            payload["reply_markup"] = {"inline_keyboard": [[{"text": label, "callback_data": data}
                                                            for label, data in buttons]]}
        else:  # a request id too long for a button: answered in the console or with `approve`
            payload["text"] = shorten(f"{body}\n\n(answer with: agent-console approve {approval.request_id} yes|no)",
                                      TEXT_LIMIT)
        return self._ref(await self.call("sendMessage", payload))

    async def replace_card(self, card: PhoneCard, text: str) -> None:
        chat, _, message_id = card.ref.partition(":")
        try:
            # Without reply_markup the edited message has no keyboard left: the buttons go with the question.
            await self.call("editMessageText", {"chat_id": int(chat), "message_id": int(message_id),
                                                "text": shorten(text, TEXT_LIMIT)})
        except SendError as exc:
            if "message is not modified" in str(exc):
                return  # it already says this
            raise

    # --- the taps -------------------------------------------------------------------------------
    async def listen(self) -> None:
        host = self.host
        offset = await host.read(lambda s: s.phone_cursor(self.name))
        payload: dict[str, Any] = {"timeout": self.poll_seconds, "allowed_updates": ["callback_query"]}
        if offset is not None:
            payload["offset"] = int(offset)
        updates = await self.call("getUpdates", payload, timeout=self.poll_seconds + self.timeout)
        self._reached = True
        if not isinstance(updates, list):
            raise SendError("getUpdates answered without a list of updates")
        for update in updates:
            if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
                continue
            update_id = update["update_id"]
            query = update.get("callback_query")
            cursor = str(update_id + 1)
            if isinstance(query, dict):
                await self._take_tap(str(update_id), cursor, query)
            else:
                await self._pass(cursor)

    async def _pass(self, cursor: str) -> None:
        """Move past an update the bot does not act on."""
        now = self.host.clock.now()
        await self.host.write(lambda s: s.move_phone_cursor(self.name, cursor, now=now))

    async def _take_tap(self, update_id: str, cursor: str, query: dict[str, Any]) -> None:
        chat_id, from_id, data = _dig(query, "message", "chat", "id"), _dig(query, "from", "id"), query.get("data")
        parsed = parse_callback(data) if isinstance(data, str) else None
        request_id, answer = (parsed[0], parsed[1]) if parsed else (None, None)
        # The owner's chat only; in a private chat (a positive id) the one tapping is its owner too.
        if chat_id != self.chat_id or (self.chat_id > 0 and from_id != self.chat_id):
            refused: str | None = "wrong_chat"
        elif parsed is None:
            refused = "forged"
        else:
            refused = self.verdict_of(self._tag, *parsed)
        message_id = _dig(query, "message", "message_id")
        tapped = f"{chat_id}:{message_id}" if isinstance(message_id, int) and refused is None else None
        taken = await self.take(update_id, cursor=cursor, request_id=request_id, answer=answer, refused=refused,
                                tapped=tapped)
        if isinstance(query.get("id"), str):
            try:  # the spinner on the button stops, and the phone says what became of the tap
                await self.call("answerCallbackQuery", {"callback_query_id": query["id"], "text": tap_reply(taken)})
            except SendError as exc:
                self.host.note_error(f"{self.name}: could not answer a tap: {exc}")


def _dig(value: Any, *keys: str) -> Any:
    """value[k1][k2]... or None where something on the way is missing or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
