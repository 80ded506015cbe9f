"""A mailbox as a source (issue 23): where the IMAP listener resumes, and the messages it takes in.

The listener's place is kept in phone_cursors under its channel's name, as "<UIDVALIDITY>:<UID>:<date>": the
folder's UIDVALIDITY, the highest UID stored, and the newest Date of the mail stored (epoch seconds). It moves in
the transaction that stores the messages it moves past, so a crash between reading and committing repeats
nothing and loses nothing (the inbox refuses a copy anyway: source id "<UIDVALIDITY>:<UID>"). Within one
UIDVALIDITY it only moves forward: a listener that lost the lease and commits late cannot send its successor
back. Its health is the source's row in chat_health (status --json "email").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from console.core.base import StaleGeneration, StoreBase

SOURCE = "email"
KEPT_WHEN_TOO_LARGE = ("kind", "from", "subject", "date", "message_id", "in_reply_to", "reply_to", "auto", "trusted",
                       "authentication", "about", "uid", "uidvalidity", "folder", "size")


@dataclass(frozen=True)
class MailCursor:
    uidvalidity: int
    uid: int          # the highest UID stored (or skipped past) in this UIDVALIDITY
    date: int         # the newest Date of the mail stored, epoch seconds (0: none yet)

    def text(self) -> str:
        return f"{self.uidvalidity}:{self.uid}:{self.date}"

    @classmethod
    def parse(cls, text: str | None) -> MailCursor | None:
        parts = (text or "").split(":")
        if len(parts) != 3 or not all(part.isdigit() for part in parts):
            return None
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))


class MailMixin(StoreBase):
    def mail_cursor(self, channel: str) -> MailCursor | None:
        return MailCursor.parse(self._scalar("SELECT cursor FROM phone_cursors WHERE channel = ?", (channel,)))

    def take_mail(
        self, channel: str, cursor: MailCursor, *, now: int, events: Sequence[tuple[str, Any]] = (),
        holder: str | None = None, gen: int | None = None,
    ) -> list[bool]:
        """Store these messages (source id, payload) and move the listener's cursor to `cursor`, in one
        transaction. Returns, for each, whether it was stored (False: the inbox already had it). A cursor behind
        the stored one in the same UIDVALIDITY (a late commit) stores what is new and leaves the cursor. Fenced by
        the listener's (holder, gen): once that generation lost the lease nothing is stored (StaleGeneration), and
        the listener must not mark or move the messages (the holder's listener reads them from the cursor)."""
        encoded = [(SOURCE, source_id, self._encode_mail(source_id, payload)) for source_id, payload in events]
        with self.write_transaction():
            refused = self._listener_refused(holder, gen, now, channel)
            if refused is None:
                return self._take_mail(channel, cursor, encoded, now)
        raise StaleGeneration(f"{channel}: a read of the mailbox refused: {refused}")

    def _take_mail(self, channel: str, cursor: MailCursor, encoded: list[tuple[str, str, str]], now: int
                   ) -> list[bool]:
        current = self.mail_cursor(channel)
        if current is None or current.uidvalidity != cursor.uidvalidity or cursor.uid > current.uid:
            date = max(cursor.date, current.date if current is not None else 0)
            self._conn.execute(
                """INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES (?, ?, ?)
                   ON CONFLICT (channel) DO UPDATE
                   SET cursor = excluded.cursor, updated_at = excluded.updated_at""",
                (channel, MailCursor(cursor.uidvalidity, cursor.uid, date).text(), now),
            )
        return self._insert_events(encoded, now) if encoded else []

    def _encode_mail(self, source_id: str, payload: Any) -> str:
        """The payload as the inbox keeps it. One the inbox refuses (over max_payload_bytes, say) keeps its headers
        and trust, with its text and attachment list dropped and a note saying so: a message the inbox cannot take
        whole must not stop the source (its transaction would fail again on every try)."""
        try:
            return self.encode_event(SOURCE, source_id, payload, by_engine=True)
        except ValueError as exc:
            if not isinstance(payload, dict):
                raise
            kept = {key: payload[key] for key in KEPT_WHEN_TOO_LARGE if key in payload}
            kept["text"] = ""
            kept["notes"] = [f"the inbox could not take it whole ({exc}): its text and attachment list were dropped"]
            return self.encode_event(SOURCE, source_id, kept, by_engine=True)

    def mail_status(self, channel: str = SOURCE) -> dict[str, Any]:
        """status --json's "email" (contract: state, reason, last_uid)."""
        row = self._conn.execute("SELECT state, reason, since FROM chat_health WHERE source = ?",
                                 (SOURCE,)).fetchall()
        state, reason, since = row[0] if row else ("off", None, None)
        cursor = self.mail_cursor(channel)
        return {"state": state, "reason": reason, "last_uid": None if cursor is None else cursor.uid,
                "uidvalidity": None if cursor is None else cursor.uidvalidity, "since": since}
