"""The ntfy channel: messages through ntfy's JSON publish API; approval cards with Yes / No buttons; the answers
read back from a response topic's JSON stream. No open port is needed on this machine.

    [[channels]]
    type = "ntfy"
    server = "https://ntfy.sh"          # or a self-hosted server
    topic = "my-agent-x7Qk2"            # the phone subscribes to this one
    answer_topic = "my-agent-x7Qk2-answers"   # default: <topic>-answers; the engine subscribes to it
    token_env = "NTFY_TOKEN"            # optional access token, sent only in the Authorization header
    priority = 4                        # for urgent messages (approval cards among them); others get 3

A card's buttons are ntfy `http` actions: a tap makes the phone POST one line to the answer topic,
"agent-console <inbox tag> <yes|no> <MAC> <request id>". The MAC (answerkey.py) is over the request and the
answer with this inbox's own key, so a forged button, another request's or another inbox's, changes
nothing. Anyone who can read the topic sees the buttons, though, and could tap them: keep the topic
unguessable or behind an access token (README, "Approving from your phone").

Each card is published under a sequence id (ntfy 2.16+): the outcome is published under the same id, which
replaces the card on the phone ("Approved", "Declined", "Expired", "Already answered: yes").
The listener resumes the stream from the last message id it stored (`since=<id>`), so a restart neither misses
nor replays an answer; before the first answer it starts from the time the channel first ran.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any, ClassVar

from console.core import Approval, PhoneCard, SendError
from console.edges.phone import PhoneChannel, describe, read_json, shorten
from console.edges.secretfile import Secret
from console.trust.callview import APPROVAL_OPENING, QUESTION_OPENING, request_view

DEFAULT_SERVER = "https://ntfy.sh"
TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
ANSWER_PREFIX = "agent-console"
TITLE = "agent-console"
MESSAGE_LIMIT = 3500          # characters; ntfy turns a message over 4096 bytes into an attachment
DEFAULT_PRIORITY = 3
UPDATE_PRIORITY = 2           # a card's outcome replaces it quietly
RETRYABLE = frozenset({408, 425, 429})
# ntfy sends a keepalive every 45 s by default: a stream silent for longer than this is dead.
STREAM_SILENCE = 120.0


def parse_answer(text: str) -> tuple[str, str, str, str] | None:
    """(tag, answer, mac, request id) from a button's line, or None if it is not one."""
    parts = text.strip().split(" ", 4)
    if len(parts) != 5 or parts[0] != ANSWER_PREFIX or parts[2] not in ("yes", "no"):
        return None
    _, tag, answer, mac, request_id = parts
    return tag, request_id, answer, mac


class NtfyChannel(PhoneChannel):
    kind: ClassVar[str] = "ntfy"
    mac_bytes: ClassVar[int] = 16
    refs_from_slots: ClassVar[bool] = True  # a message's sequence id is its slot

    def __init__(
        self, *, name: str, server: str, topic: str, answer_topic: str, token: Secret | None, priority: int,
        secrets_file: Path, timeout: float, at_most_once: bool = False,
    ) -> None:
        super().__init__(name, secrets_file=secrets_file, timeout=timeout, at_most_once=at_most_once)
        self.server = server.rstrip("/")
        self.topic = topic
        self.answer_topic = answer_topic
        self.priority = priority
        self._token = token
        self.stream_silence = STREAM_SILENCE

    def _headers(self) -> dict[str, str]:
        # The token goes in this header and nowhere else: never in a message, a button or a URL.
        return {"Authorization": f"Bearer {self._token.reveal()}"} if self._token is not None else {}

    async def prepare(self) -> None:
        # Before the first answer is stored the stream starts from when the channel first ran (a Unix time
        # ntfy's `since` takes), so a tap made while the engine is down is still read when it comes back.
        host = self.host
        now = host.clock.now()
        await host.write(lambda s: s.start_phone_cursor(self.name, str(now), now=now))

    # --- publishing -----------------------------------------------------------------------------
    async def post(self, text: str, *, slot: str, urgent: bool, reply_to: str | None = None, owner_only: bool = False,
                   outbox_id: int | None = None, retried: bool = False) -> list[str]:
        await self._publish({"message": shorten(text, MESSAGE_LIMIT),
                             "priority": self.priority if urgent else DEFAULT_PRIORITY}, slot)
        return [slot]

    async def post_card(self, body: str, approval: Approval, *, slot: str, owner_only: bool = False) -> str:
        answer_url = f"{self.server}/{self.answer_topic}"
        actions = [
            {"action": "http", "label": label, "url": answer_url, "method": "POST",
             "body": f"{ANSWER_PREFIX} {self._tag} {word} {self.mac(approval.request_id, word)} {approval.request_id}"}
            for label, word in (("Yes", "yes"), ("No", "no"))
        ]
        # The card's own marks, which a run's message cannot carry: its title, its tags and its buttons.
        asked = request_view(approval)
        tags = ["question"] if asked.is_question else ["lock"]
        if asked.origin is not None and not asked.origin.trusted:
            tags.append("warning")
        await self._publish({"message": shorten(body, MESSAGE_LIMIT), "priority": self.priority, "tags": tags,
                             "actions": actions}, slot,
                            title=f"{QUESTION_OPENING if asked.is_question else APPROVAL_OPENING} · {TITLE}")
        return slot

    async def replace_card(self, card: PhoneCard, text: str) -> None:
        tag = "white_check_mark" if card.wanted == "yes" else "x" if card.wanted == "no" else "hourglass"
        await self._publish({"message": shorten(text, MESSAGE_LIMIT), "priority": UPDATE_PRIORITY, "tags": [tag]},
                            card.ref)

    async def _publish(self, fields: dict[str, Any], sequence_id: str, *, title: str = TITLE) -> None:
        from aiohttp import ClientError  # loaded once the channel runs

        message = {"topic": self.topic, "title": title, "sequence_id": sequence_id, **fields}
        try:
            async with self.session.post(f"{self.server}/", json=message, headers=self._headers()) as response:
                if response.status >= 300:
                    permanent = response.status < 500 and response.status not in RETRYABLE
                    raise SendError(f"{self.name}: ntfy answered {response.status} {response.reason}",
                                    permanent=permanent)
                await read_json(response)
        except SendError:
            raise
        except (ClientError, TimeoutError) as exc:
            raise SendError(f"{self.name}: {describe(exc)}", permanent=False) from None

    # --- the answer stream ----------------------------------------------------------------------
    async def listen(self) -> None:
        host = self.host
        since = await host.read(lambda s: s.phone_cursor(self.name)) or "all"
        url = f"{self.server}/{urllib.parse.quote(self.answer_topic)}/json"
        from aiohttp import ClientTimeout  # loaded once the channel runs, not before the console's first frame

        # No total deadline: the stream stays open; a silence longer than the keepalive interval is a failure.
        timeout = ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.stream_silence)
        async with self.session.get(url, params={"since": since}, headers=self._headers(),
                                    timeout=timeout) as response:
            if response.status != 200:
                raise SendError(f"ntfy answered {response.status} {response.reason} for the answer topic")
            self._reached = True
            async for raw in response.content:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(message, dict) and message.get("event") == "message" and message.get("id"):
                    await self._take_message(message)
        raise SendError("the answer stream ended")

    async def _take_message(self, message: dict[str, Any]) -> None:
        message_id = str(message["id"])
        text = message.get("message")
        parsed = parse_answer(text) if isinstance(text, str) else None
        if parsed is None:  # not a button's answer (anything may be published to a topic)
            await self.take(message_id, cursor=message_id, request_id=None, answer=None, refused="forged")
            return
        tag, request_id, answer, mac = parsed
        await self.take(message_id, cursor=message_id, request_id=request_id, answer=answer,
                        refused=self.verdict_of(tag, request_id, answer, mac))
