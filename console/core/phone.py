"""Phone channels' durable state: what each delivered, its approval cards, where its listener resumes, and
every answer that came from a phone with what became of it.

An answer from a phone is taken in one transaction: the service's id is checked against the ledger (a
duplicate changes nothing), the answer goes through the one answer path (first outcome stands, deadline
checked), the verdict is recorded, and the listener's cursor moves past it. A crash anywhere before the
commit leaves the answer to be read again; after it, the answer is never taken twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from console.core.base import StaleGeneration, StoreBase
from console.core.models import PHONE_IGNORED, PHONE_VERDICTS, PhoneAnswer, PhoneCard

ASKING = "ask"  # the state of a card whose question is open


@dataclass(frozen=True)
class PhonePiece:
    """A message a phone channel sent, as one of the pieces of an outbox message."""

    outbox_id: int
    piece: int       # 1, 2, ...
    pieces: int      # how many the outbox message was cut into
    event_id: int | None  # the event the outbox message was filed under (the run's first), if any
AGAIN = "again:"  # prefix of the state shown after a tap on an approval already settled


class PhoneMixin(StoreBase):
    def inbox_tag(self) -> str:
        """This inbox's name on a shared answer topic (random, made by the migration; not a secret)."""
        return str(self._scalar("SELECT tag FROM inbox_identity WHERE one = 1"))

    # --- what a channel delivered -------------------------------------------------------------
    def phone_sent_ref(self, channel: str, outbox_id: int) -> str | None:
        """The service's handle for an outbox message this channel already delivered, else None."""
        ref = self._scalar("SELECT ref FROM phone_messages WHERE channel = ? AND outbox_id = ?", (channel, outbox_id))
        return None if ref is None else str(ref)

    def record_phone_message(
        self, channel: str, outbox_id: int, ref: str, *, now: int, request_id: str | None = None,
        shown: str | None = None, pieces: Sequence[str] = (),
    ) -> None:
        """Record a delivered message (a card, when request_id is given, showing `shown`). A card wants the
        outcome that stands now, so an approval settled while its card was on the way is put right. pieces: the
        handles of every piece the service got it in, in order (a long Telegram reply), so that an answer to any
        of them is known for an answer to this message (phone_message_of)."""
        with self.write_transaction():
            self._record_phone_message(channel, outbox_id, ref, request_id, shown, now)
            for number, piece in enumerate(pieces, 1):
                self._conn.execute(
                    """INSERT INTO phone_pieces (channel, ref, outbox_id, piece, pieces) VALUES (?, ?, ?, ?, ?)
                       ON CONFLICT (channel, ref) DO NOTHING""",
                    (channel, piece, outbox_id, number, len(pieces)),
                )

    def record_phone_piece(self, channel: str, outbox_id: int, ref: str, *, piece: int, pieces: int) -> None:
        """One piece of a message cut in pieces, recorded as it reaches the service: a send that fails (or an
        engine that stops) midway is retried from the first piece not recorded (phone_pieces_sent)."""
        with self.write_transaction():
            self._conn.execute(
                """INSERT INTO phone_pieces (channel, ref, outbox_id, piece, pieces) VALUES (?, ?, ?, ?, ?)
                   ON CONFLICT (channel, ref) DO NOTHING""",
                (channel, ref, outbox_id, piece, pieces),
            )

    def phone_pieces_sent(self, channel: str, outbox_id: int) -> dict[int, str]:
        """The pieces of an outbox message this channel already sent: piece number -> the service's handle."""
        return {int(piece): str(ref) for piece, ref in self._conn.execute(
            "SELECT piece, ref FROM phone_pieces INDEXED BY phone_pieces_outbox WHERE outbox_id = ? AND channel = ?",
            (outbox_id, channel))}

    def phone_message_of(self, channel: str, ref: str) -> PhonePiece | None:
        """Which outbox message (and which piece of it) the service's message `ref` is, when this channel sent it:
        what the owner answers when they reply to it."""
        rows = self._conn.execute(
            """SELECT p.outbox_id, p.piece, p.pieces, o.event_id FROM phone_pieces p
               LEFT JOIN outbox o ON o.id = p.outbox_id WHERE p.channel = ? AND p.ref = ?""",
            (channel, ref),
        ).fetchall()
        return PhonePiece(int(rows[0][0]), int(rows[0][1]), int(rows[0][2]), rows[0][3]) if rows else None

    def _record_phone_message(
        self, channel: str, outbox_id: int, ref: str, request_id: str | None, shown: str | None, now: int
    ) -> None:
        self._conn.execute(
            """INSERT INTO phone_messages (channel, outbox_id, ref, request_id, shown, wanted, sent_at, updated_at)
               VALUES (?, ?, ?, ?, ?,
                       CASE WHEN ? IS NULL THEN NULL
                            ELSE COALESCE((SELECT outcome FROM approvals WHERE request_id = ?), ?) END,
                       ?, ?)
               ON CONFLICT (channel, outbox_id) DO NOTHING""",
            (channel, outbox_id, ref, request_id, shown, request_id, request_id, ASKING, now, now),
        )

    def _adopt_card(self, channel: str, request_id: str, tapped: str | None, prefix: str | None, now: int) -> None:
        """A valid tap on a card this channel has no record of: the card reached the phone, but the engine
        that sent it stopped before recording it. Its announcement is recorded now (as the tapped message,
        or under the handle the channel derives from the message id), so the card is replaced with its
        outcome and the batch, when it is retried, does not send it a second time."""
        if tapped is None and prefix is None:
            return  # the channel cannot tell which message was tapped
        if self._scalar("SELECT 1 FROM phone_messages INDEXED BY phone_cards_request "
                        "WHERE request_id = ? AND channel = ? LIMIT 1", (request_id, channel)):
            return
        outbox_id = self._scalar("SELECT MIN(id) FROM outbox INDEXED BY outbox_approval WHERE approval_id = ?",
                                 (request_id,))
        if outbox_id is not None:
            self._record_phone_message(channel, int(outbox_id), tapped or f"{prefix}{outbox_id}", request_id,
                                       ASKING, now)

    def phone_cards_due(self, channel: str, *, now: int, limit: int = 20) -> list[PhoneCard]:
        """This channel's cards that show something other than what they should, due now (oldest first)."""
        return [
            PhoneCard(channel, *row)
            for row in self._conn.execute(
                """SELECT p.outbox_id, p.ref, p.request_id, o.body, COALESCE(a.action, ''), p.wanted, p.shown,
                          a.answered_via, p.tries
                   FROM phone_messages p INDEXED BY phone_cards_due
                   JOIN outbox o ON o.id = p.outbox_id
                   LEFT JOIN approvals a ON a.request_id = p.request_id
                   WHERE p.channel = ? AND p.wanted IS NOT p.shown AND COALESCE(p.next_try_at, 0) <= ?
                   ORDER BY p.outbox_id LIMIT ?""",
                (channel, now, limit),
            )
        ]

    def next_phone_card_at(self, channel: str) -> int | None:
        """When this channel's next card update is due (None: none is waiting)."""
        due = self._scalar(
            """SELECT MIN(COALESCE(next_try_at, 0)) FROM phone_messages INDEXED BY phone_cards_due
               WHERE channel = ? AND wanted IS NOT shown""",
            (channel,),
        )
        return None if due is None else int(due)

    def phone_card_shown(self, channel: str, outbox_id: int, state: str, *, now: int) -> None:
        with self.write_transaction():
            self._conn.execute(
                """UPDATE phone_messages SET shown = ?, tries = 0, next_try_at = NULL, error = NULL, updated_at = ?
                   WHERE channel = ? AND outbox_id = ?""",
                (state, now, channel, outbox_id),
            )

    def phone_card_failed(
        self, channel: str, outbox_id: int, error: str, *, now: int, retry_at: int | None
    ) -> None:
        """A card update that failed: tried again at retry_at, or given up (retry_at None: the card stays as
        it is, the error kept for the record)."""
        with self.write_transaction():
            if retry_at is None:
                self._conn.execute(
                    """UPDATE phone_messages SET shown = wanted, tries = tries + 1, next_try_at = NULL, error = ?,
                       updated_at = ? WHERE channel = ? AND outbox_id = ?""",
                    (error, now, channel, outbox_id),
                )
            else:
                self._conn.execute(
                    """UPDATE phone_messages SET tries = tries + 1, next_try_at = ?, error = ?, updated_at = ?
                       WHERE channel = ? AND outbox_id = ?""",
                    (retry_at, error, now, channel, outbox_id),
                )

    # --- the listener's place -----------------------------------------------------------------
    def phone_cursor(self, channel: str) -> str | None:
        cursor = self._scalar("SELECT cursor FROM phone_cursors WHERE channel = ?", (channel,))
        return None if cursor is None else str(cursor)

    def start_phone_cursor(self, channel: str, cursor: str, *, now: int) -> str:
        """The stored cursor, or `cursor` stored as the first one. Returns the one in force."""
        with self.write_transaction():
            self._conn.execute(
                """INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES (?, ?, ?)
                   ON CONFLICT (channel) DO NOTHING""",
                (channel, cursor, now),
            )
            return str(self._scalar("SELECT cursor FROM phone_cursors WHERE channel = ?", (channel,)))

    def move_phone_cursor(self, channel: str, cursor: str, *, now: int, holder: str | None = None,
                          gen: int | None = None, kept: Sequence[tuple[str, int]] = ()) -> None:
        """Past something that is not an answer (a message of another kind on the topic, an update the bot
        does not act on). Fenced by the listener's (holder, gen): StaleGeneration once it lost the lease."""
        with self.write_transaction():
            refused = self._listener_refused(holder, gen, now, channel)
            if refused is None:
                self._set_cursor(channel, cursor, now)
                self._take_kept(kept, now)
                return
        raise StaleGeneration(f"{channel}: moving its cursor refused: {refused}")

    def _set_cursor(self, channel: str, cursor: str, now: int) -> None:
        self._conn.execute(
            """INSERT INTO phone_cursors (channel, cursor, updated_at) VALUES (?, ?, ?)
               ON CONFLICT (channel) DO UPDATE SET cursor = excluded.cursor, updated_at = excluded.updated_at""",
            (channel, cursor, now),
        )

    # --- answers --------------------------------------------------------------------------------
    def take_phone_answer(
        self,
        channel: str,
        answer_key: str,
        *,
        via: str,
        now: int,
        request_id: str | None = None,
        answer: str | None = None,
        refused: str | None = None,
        cursor: str | None = None,
        tapped: str | None = None,
        ref_prefix: str | None = None,
        holder: str | None = None,
        gen: int | None = None,
        kept: Sequence[tuple[str, int]] = (),
    ) -> PhoneAnswer:
        """Take one answer from a phone, under the service's own id (answer_key), in one transaction.

        refused names why a channel already ignored it (forged, other_inbox, wrong_chat): it is recorded
        and counted, nothing else changes. Otherwise the answer goes through the one answer path with
        `via`; when an outcome already stood, this channel's card of the request is set to say so
        ("Already answered: yes"). cursor, if given, is where the listener resumes after this answer.
        tapped is the service's handle of the message tapped (Telegram's chat:message), and ref_prefix what a
        handle is made of with the outbox id (ntfy's sequence ids; None where it is not): see _adopt_card.
        Fenced by the listener's (holder, gen): once that generation lost the lease the answer is not taken and
        nothing changes (StaleGeneration); the holder's listener reads it again from the stored cursor."""
        if refused is not None and refused not in PHONE_IGNORED:
            raise ValueError(f"refused must be one of {', '.join(PHONE_IGNORED)}, not {refused!r}")
        with self.write_transaction():
            fenced = self._listener_refused(holder, gen, now, channel)
            if fenced is None:
                self._take_kept(kept, now)  # the kept webhook update the answer came in
                return self._take_answer(channel, answer_key, via, now, request_id, answer, refused, cursor, tapped,
                                         ref_prefix)
        raise StaleGeneration(f"{channel}: an answer refused: {fenced}")

    def _take_answer(self, channel: str, answer_key: str, via: str, now: int, request_id: str | None,
                     answer: str | None, refused: str | None, cursor: str | None, tapped: str | None,
                     ref_prefix: str | None) -> PhoneAnswer:
        if cursor is not None:
            self._set_cursor(channel, cursor, now)
        seen = self._conn.execute(
            """UPDATE phone_answers SET repeats = repeats + 1 WHERE channel = ? AND answer_key = ?
               RETURNING verdict""",
            (channel, answer_key),
        ).fetchall()
        if seen:
            return PhoneAnswer("duplicate", None)
        outcome: str | None = None
        if refused is not None:
            verdict = refused
        elif request_id is None or answer is None:
            verdict = "forged"
        else:
            outcome, settled = self._answer(request_id, answer, now, via)
            if outcome != "unknown":
                self._adopt_card(channel, request_id, tapped, ref_prefix, now)
            if outcome == "unknown":
                verdict, outcome = "unknown", None
            elif settled:
                verdict = "late" if outcome == "expired" else "settled"
            else:
                verdict = "already_answered"
                if outcome != "expired":  # a card that says "Expired" already says all there is
                    self._conn.execute(
                        """UPDATE phone_messages SET wanted = ?, tries = 0, next_try_at = NULL, updated_at = ?
                           WHERE channel = ? AND request_id = ?""",
                        (AGAIN + outcome, now, channel, request_id),
                    )
        self._conn.execute(
            """INSERT INTO phone_answers (channel, answer_key, request_id, answer, verdict, at)
               VALUES (?, ?, ?, ?, ?, ?)""",
            (channel, answer_key, request_id, answer, verdict, now),
        )
        return PhoneAnswer(verdict, outcome)

    def phone_answer_counts(self) -> dict[str, int]:
        """How many answers from phones ended each way (every verdict, zeros included)."""
        counts: dict[str, Any] = dict.fromkeys(PHONE_VERDICTS, 0)
        for verdict, n, repeats in self._conn.execute(
            "SELECT verdict, COUNT(*), SUM(repeats) FROM phone_answers GROUP BY verdict"
        ):
            counts[verdict] = counts.get(verdict, 0) + int(n)
            counts["duplicate"] += int(repeats or 0)
        return counts

    def phone_answers(self, *, request_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The ledger of answers from phones, newest first (of one request, if given)."""
        clause, params = (("INDEXED BY phone_answers_request WHERE request_id = ?", (request_id, limit)) if request_id
                          else ("", (limit,)))
        return [
            {"channel": channel, "key": key, "request_id": rid, "answer": answer, "verdict": verdict, "at": at,
             "repeats": repeats}
            for channel, key, rid, answer, verdict, at, repeats in self._conn.execute(
                f"""SELECT channel, answer_key, request_id, answer, verdict, at, repeats FROM phone_answers
                    {clause} ORDER BY at DESC LIMIT ?""",
                params,
            )
        ]
