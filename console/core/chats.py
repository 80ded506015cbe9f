"""Chat sources' durable state (issue 20): the chats paired as the owner's, the one-time pairing code, the chats
that are not (counted, told once an hour that the bot is private), each source's health, and the messages it
takes in.

A chat source's listener takes what it read in one transaction with the cursor it resumes from: the owner's
messages become events (source and source id as the service names them; the inbox refuses a copy) and the cursor
moves past them together, so a crash between reading and committing repeats nothing and loses nothing. The
cursor only moves forward: a listener that lost the lease and commits late cannot send its successor back.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Any

from console.core.base import StaleGeneration, StoreBase, dumps, loads
from console.core.models import ChatPairing, ChatTake

PAIR_CODE_SECONDS = 600  # a pairing code is good for ten minutes
PAIR_CODE_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read off a screen, typed on a phone
PRIVATE_NOTICE_EVERY = 3600  # a chat that is not paired is told at most once an hour that the bot is private
TAKEN_KEPT_SECONDS = 7 * 86400  # a taken webhook update is remembered this long, to refuse a redelivery of it
HEALTH_STATES = ("ok", "paused", "conflict", "waiting", "offline")


def pair_code() -> str:
    """A fresh one-time pairing code: 8 characters, 40 bits."""
    return "".join(secrets.choice(PAIR_CODE_CHARS) for _ in range(8))


def code_hash(code: str) -> str:
    """What the inbox keeps of a code (the code is printed once, never stored); case does not matter."""
    return hashlib.sha256(code.strip().upper().encode("utf-8")).hexdigest()


class ChatMixin(StoreBase):
    # --- pairing --------------------------------------------------------------------------------
    def new_pair_code(self, source: str, code_hash: str, *, expires_at: int) -> None:
        """Open a pairing: the hash of a one-time code, valid until expires_at. It replaces any code before it."""
        with self.write_transaction():
            self._conn.execute(
                """INSERT INTO chat_pair_codes (source, code_hash, expires_at) VALUES (?, ?, ?)
                   ON CONFLICT (source) DO UPDATE SET code_hash = excluded.code_hash,
                                                      expires_at = excluded.expires_at""",
                (source, code_hash, expires_at),
            )

    def pair_chat(
        self, source: str, code_hash: str, *, chat_id: str, owner_id: str, kind: str, title: str | None, now: int,
        channel: str | None = None, cursor: str | None = None, holder: str | None = None, gen: int | None = None,
        kept: Sequence[tuple[str, int]] = (),
    ) -> bool:
        """Pair the chat whose user sent the code (its hash here) if the code is the open one and has not
        expired; the code is then used up. The listener's cursor moves past the message in the same
        transaction (a crash repeats nothing). False: no such code, or too late (nothing paired). Fenced by the
        listener's (holder, gen): once that generation lost the lease nothing changes (StaleGeneration)."""
        with self.write_transaction():
            refused = self._listener_refused(holder, gen, now, channel or source)
            if refused is None:
                if channel is not None and cursor is not None:
                    self._move_cursor_forward(channel, cursor, now)
                self._take_kept(kept, now)
                return self._pair(source, code_hash, chat_id, owner_id, kind, title, now)
        raise StaleGeneration(f"{channel or source}: a pairing refused: {refused}")

    def _pair(self, source: str, code_hash: str, chat_id: str, owner_id: str, kind: str, title: str | None,
              now: int) -> bool:
        row = self._conn.execute("SELECT code_hash, expires_at FROM chat_pair_codes WHERE source = ?",
                                 (source,)).fetchall()
        if not row or int(row[0][1]) < now or not hmac.compare_digest(str(row[0][0]), code_hash):
            return False
        self._conn.execute("DELETE FROM chat_pair_codes WHERE source = ?", (source,))
        self._conn.execute(
            """INSERT INTO chat_pairings (source, chat_id, owner_id, kind, title, paired_at)
               VALUES (?, ?, ?, ?, ?, ?)
               ON CONFLICT (source, chat_id) DO UPDATE SET owner_id = excluded.owner_id,
                   kind = excluded.kind, title = excluded.title, paired_at = excluded.paired_at""",
            (source, chat_id, owner_id, kind, title, now),
        )
        self._conn.execute("DELETE FROM chat_strangers WHERE source = ? AND chat_id = ?", (source, chat_id))
        return True

    def unpair_chat(self, source: str, chat_id: str | None = None) -> int:
        """Forget one paired chat (every one when chat_id is None) and any open code; how many were paired."""
        with self.write_transaction():
            self._conn.execute("DELETE FROM chat_pair_codes WHERE source = ?", (source,))
            if chat_id is None:
                rows = self._conn.execute("DELETE FROM chat_pairings WHERE source = ? RETURNING chat_id",
                                          (source,)).fetchall()
            else:
                rows = self._conn.execute(
                    "DELETE FROM chat_pairings WHERE source = ? AND chat_id = ? RETURNING chat_id", (source, chat_id)
                ).fetchall()
            return len(rows)

    def chat_pairings(self, source: str) -> list[ChatPairing]:
        return [ChatPairing(source, *row) for row in self._conn.execute(
            """SELECT chat_id, owner_id, kind, title, paired_at FROM chat_pairings WHERE source = ?
               ORDER BY paired_at, chat_id""", (source,))]

    # --- what the listener takes in -------------------------------------------------------------
    def take_chat_updates(
        self, channel: str, source: str, *, now: int, cursor: str | None = None,
        events: Sequence[tuple[str, Any]] = (), strangers: Sequence[str] = (), skipped: int = 0,
        holder: str | None = None, gen: int | None = None, kept: Sequence[tuple[str, int]] = (),
    ) -> ChatTake:
        """One read of the listener, in one transaction: the owner's messages stored as events (source id,
        payload; a copy is refused and counted), the messages of chats that are not paired counted (those not
        told within the hour are returned, to be told the bot is private), updates skipped as malformed or
        unknown counted, and the cursor moved past all of it. Fenced by the listener's (holder, gen): once that
        generation lost the lease nothing is stored and the cursor stays (StaleGeneration); the holder reads the
        same updates again from the stored cursor. kept: the webhook updates (source, update id) this read took,
        marked taken in the same transaction."""
        encoded: list[tuple[str, str, str]] = []
        for source_id, payload in events:
            try:
                encoded.append((source, source_id, self.encode_event(source, source_id, payload, by_engine=True)))
            except ValueError:  # over the payload limit, say: skipped and counted, never a loop stuck on it
                skipped += 1
        with self.write_transaction():
            refused = self._listener_refused(holder, gen, now, channel)
            if refused is None:
                self._take_kept(kept, now)
                return self._take(channel, source, now, cursor, encoded, strangers, skipped)
        raise StaleGeneration(f"{channel}: a read of the listener refused: {refused}")

    def _take(self, channel: str, source: str, now: int, cursor: str | None, encoded: list[tuple[str, str, str]],
              strangers: Sequence[str], skipped: int) -> ChatTake:
        if cursor is not None:
            self._move_cursor_forward(channel, cursor, now)
        stored = self._insert_events(encoded, now) if encoded else []
        tell: list[str] = []
        for chat_id in strangers:
            told = self._conn.execute(
                """INSERT INTO chat_strangers (source, chat_id, messages, first_at, last_at, told_at)
                   VALUES (?, ?, 1, ?, ?, NULL)
                   ON CONFLICT (source, chat_id) DO UPDATE SET messages = chat_strangers.messages + 1,
                                                               last_at = excluded.last_at
                   RETURNING told_at""",
                (source, chat_id, now, now),
            ).fetchall()
            if (told[0][0] is None or int(told[0][0]) <= now - PRIVATE_NOTICE_EVERY) and chat_id not in tell:
                self._conn.execute("UPDATE chat_strangers SET told_at = ? WHERE source = ? AND chat_id = ?",
                                   (now, source, chat_id))
                tell.append(chat_id)
        if skipped:
            self._health_row(source, now)
            self._conn.execute("UPDATE chat_health SET skipped = skipped + ? WHERE source = ?", (skipped, source))
        return ChatTake(stored, tell)

    def _move_cursor_forward(self, channel: str, cursor: str, now: int) -> None:
        current = self._scalar("SELECT cursor FROM phone_cursors WHERE channel = ?", (channel,))
        if current is not None and str(current).isdigit() and cursor.isdigit() and int(cursor) <= int(current):
            return  # a late commit from a listener that lost the lease: its successor is already past it
        self._conn.execute(
            """INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES (?, ?, ?)
               ON CONFLICT (channel) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at""",
            (channel, cursor, now),
        )

    # --- webhook mode: updates the receiver kept, for the engine to take --------------------------------
    def queue_chat_update(self, source: str, update_id: int, body: Any, *, now: int, channel: str) -> bool:
        """Keep an update the service POSTed (False: a redelivery, kept already or taken within
        TAKEN_KEPT_SECONDS). Durable when this returns. Whatever its id: the service may deliver updates out of
        order, so one below the listener's cursor is not taken for a redelivery (the listener reads every kept
        update not yet taken, not from its cursor on). channel names the listener that takes it."""
        text = dumps(body)
        with self.write_transaction():
            rows = self._conn.execute(
                """INSERT INTO chat_updates (source, update_id, body, received_at) VALUES (?, ?, ?, ?)
                   ON CONFLICT (source, update_id) DO NOTHING RETURNING update_id""",
                (source, update_id, text, now),
            ).fetchall()
            return bool(rows)

    def chat_updates(self, source: str, *, from_id: int = 0, limit: int = 100) -> list[Any]:
        """The kept updates not yet taken, from update id from_id on, in order."""
        return [loads(row[0]) for row in self._conn.execute(
            """SELECT body FROM chat_updates INDEXED BY chat_updates_waiting
               WHERE source = ? AND update_id >= ? AND taken_at IS NULL ORDER BY update_id LIMIT ?""",
            (source, from_id, limit))]

    def _take_kept(self, kept: Sequence[tuple[str, int]], now: int) -> None:
        """Mark exactly these kept updates taken (inside the listener's write that takes them), and forget those
        taken long ago: an update read is taken with what it became, one kept meanwhile waits for the next read."""
        if not kept:
            return
        for source, update_id in kept:
            self._conn.execute("UPDATE chat_updates SET taken_at = ? WHERE source = ? AND update_id = ?",
                               (now, source, update_id))
        for source in sorted({source for source, _ in kept}):
            self._conn.execute("DELETE FROM chat_updates WHERE source = ? AND taken_at < ?",
                               (source, now - TAKEN_KEPT_SECONDS))

    # --- health -----------------------------------------------------------------------------------
    def _health_row(self, source: str, now: int) -> None:
        self._conn.execute("""INSERT INTO chat_health (source, state, reason, since) VALUES (?, 'ok', NULL, ?)
                              ON CONFLICT (source) DO NOTHING""", (source, now))

    def set_chat_health(self, source: str, state: str, reason: str | None, *, now: int, holder: str | None = None,
                        gen: int | None = None) -> bool:
        """Record how the source's listener is doing; True when this changed the state (say it once). Fenced by
        the listener's (holder, gen): one whose engine lost the lease (and now meets its successor's 409, say)
        does not overwrite what the holder's listener said."""
        if state not in HEALTH_STATES:
            raise ValueError(f"state must be one of {', '.join(HEALTH_STATES)}, not {state!r}")
        with self.write_transaction():
            refused = self._listener_refused(holder, gen, now, source)
            if refused is None:
                return self._set_health(source, state, reason, now)
        raise StaleGeneration(f"{source}: its health refused: {refused}")

    def _set_health(self, source: str, state: str, reason: str | None, now: int) -> bool:
        before = self._conn.execute("SELECT state, reason FROM chat_health WHERE source = ?", (source,)).fetchall()
        if before and (before[0][0], before[0][1]) == (state, reason):
            return False
        self._health_row(source, now)
        self._conn.execute("UPDATE chat_health SET state = ?, reason = ?, since = ? WHERE source = ?",
                           (state, reason, now, source))
        return not before or before[0][0] != state

    def chat_health(self, source: str) -> tuple[str, str | None]:
        row = self._conn.execute("SELECT state, reason FROM chat_health WHERE source = ?", (source,)).fetchall()
        return (str(row[0][0]), row[0][1]) if row else ("off", None)

    def chat_status(self, source: str) -> dict[str, Any]:
        """status --json's entry for a chat source (contract: state, reason, paired_chats, refused_messages)."""
        row = self._conn.execute("SELECT state, reason, since, skipped FROM chat_health WHERE source = ?",
                                 (source,)).fetchall()
        state, reason, since, skipped = row[0] if row else ("off", None, None, 0)
        refused = self._scalar("SELECT COALESCE(SUM(messages), 0) FROM chat_strangers WHERE source = ?", (source,))
        return {"state": state, "reason": reason, "paired_chats": [p.public() for p in self.chat_pairings(source)],
                "refused_messages": int(refused or 0), "refused_chats": int(self._scalar(
                    "SELECT COUNT(*) FROM chat_strangers WHERE source = ?", (source,)) or 0),
                "skipped_updates": int(skipped or 0), "since": since}

    # --- the conversation a run answers -------------------------------------------------------------
    def outbox_reply_to(self, outbox_id: int) -> str | None:
        value = self._scalar("SELECT reply_to FROM outbox WHERE id = ?", (outbox_id,))
        return None if value is None else str(value)

    def chats_in_progress(self, source: str) -> list[str]:
        """The source ids of this source's events a run is working on now (for a "typing…" indicator)."""
        return [str(row[0]) for row in self._conn.execute(
            "SELECT source_id FROM inbox INDEXED BY inbox_running WHERE status = 'running' AND source = ?", (source,))]
