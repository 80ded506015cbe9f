"""What a chat source is (issue 20): a chat app through which the owner talks with the agent, both ways, durably.

Telegram is the first. Slack (Socket Mode), Matrix or Discord is one module implementing ChatSource, without
touching the runtime or the core: the inbox already keeps what every chat source needs under its source name
(paired chats, the pairing code, chats refused, the source's health, the listener's cursor, the outbox's
reply_to), and the engine runs a chat source as a phone channel (edges/phone.py: started by the engine that
holds the lease, sending the outbox, keeping approval cards).

A chat source's four parts:
- receive: read the service's messages from a stored cursor and hand them to Store.take_chat_updates with the
  cursor that follows them, in one transaction (a crash repeats nothing; the inbox refuses a copy). The
  owner's messages become events of kind "chat" under the source's name, source id "<chat>:<message>".
- pair: a one-time code from `agent-console <source> pair` (pair_code / code_hash here), sent by the owner from
  the chat to pair; Store.pair_chat checks and uses it up. Other chats never start a run: counted, and told
  at most once an hour that the bot is private.
- reply: a run's message whose outbox row has reply_to "<source>:<chat>:<message>" goes to that chat, as a reply
  to that message, cut at the service's limit on paragraph boundaries (split_text), sent as plain text.
- commands: the few the engine answers itself (COMMANDS), without the model.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from console.core.chats import PAIR_CODE_SECONDS, code_hash, pair_code

__all__ = ["COMMANDS", "PAIR_CODE_SECONDS", "PRIVATE_REPLY", "ChatSource", "code_hash", "pair_code", "split_text"]
COMMANDS = {
    "status": "the agent's state, pending approvals, dead events, today's spend",
    "pending": "the soonest pending approvals, with Yes / No buttons",
    "pause": "pause the agent: your messages are kept, nothing runs until /resume",
    "resume": "let the agent run again",
    "show": "the whole of a request you are asked about, nothing shortened: /show REQUEST_ID",
    "schedules": "the agent's schedules, with Pause / Renew / Delete buttons",
    "help": "what the bot understands",
}
PRIVATE_REPLY = "This bot is private: it answers only its owner's paired chats."


@runtime_checkable
class ChatSource(Protocol):
    """One chat app as the owner's conversation with the agent (TelegramChannel is one). The engine runs it as a
    phone channel (edges/phone.py): start() binds it to the engine that holds the lease, listen() is called in
    a loop, send() delivers the outbox; what it keeps lives in the inbox under `source`."""

    source: str  # the events' source name (the inbox key's first half), one of core.base.CHAT_SOURCES

    async def listen(self) -> None:
        """receive: one read from the service from the stored cursor, stored with the next cursor in one
        transaction (Store.take_chat_updates); a pairing code checked with Store.pair_chat; a tap through
        Store.take_phone_answer. Raises on a network failure (the engine reconnects with backoff)."""
        ...

    async def post(self, text: str, *, slot: str, urgent: bool, reply_to: str | None = None) -> str:
        """reply: send text to the chat reply_to names ('<source>:<chat>:<message>', as a reply to that message)
        or else to the owner's chat; returns the service's handle of the (first) message sent."""
        ...

    async def answer_command(self, chat_id: int, command: str, argument: str = "", *, private: bool = True) -> None:
        """commands: answer one of COMMANDS (no model involved) in the chat it came from (argument: what followed
        the command; private: the chat is the owner's direct chat, not a group)."""
        ...


def split_text(text: str, limit: int) -> list[str]:
    """Text cut into pieces of at most `limit` characters: at paragraph boundaries (a blank line) where a
    paragraph fits, else at line ends, else at spaces, else hard. Nothing is dropped; no piece is empty."""
    text = text.strip("\n") or text
    pieces: list[str] = []
    while len(text) > limit:
        window = text[: limit + 1]
        cut = -1
        for separator in ("\n\n", "\n", " "):
            cut = window.rfind(separator, 0, limit)
            if cut > 0:
                break
        if cut <= 0:
            pieces.append(text[:limit])
            text = text[limit:]
            continue
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip("\n ")
    if text or not pieces:
        pieces.append(text)
    return [piece for piece in pieces if piece] or [""]
