"""The paced outbox: held messages, at most one send per gap, an urgent lane, retries under one key.

Unlike the seed, the send does not happen inside the write transaction: holding SQLite's write
lock across a network call would stall every webhook ingest for as long as a channel takes. A
dispatch instead claims a batch (state `sending`, with a claim deadline), sends outside any
transaction, then records the outcome. A dispatcher that dies mid-send leaves the batch to be
retried under the same idempotency key once the claim lapses: at-least-once, deduplicated by the
channel. At-most-once marks the batch sent before sending, and a failure is then final.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from console.core.base import SendError, StoreBase
from console.core.db import transaction, translate_errors
from console.core.models import Batch, OutboxMessage

Send = Callable[[Batch], Any]


class OutboxChannel(Protocol):
    """Where a batch goes (console/edges/channels.py has the real ones). send raises SendError on failure."""

    @property
    def name(self) -> str: ...

    @property
    def at_most_once(self) -> bool: ...

    def send(self, batch: Batch) -> None: ...


class OutboxMixin(StoreBase):
    def queue_message(
        self, body: str, *, now: int, urgent: bool = False, event_id: int | None = None, approval_id: str | None = None
    ) -> int:
        """Hold a message for the dispatcher. approval_id names the approval it announces: a phone channel
        sends it as a card with Yes / No buttons (an announcement always takes the urgent lane)."""
        if not isinstance(body, str) or not body.strip():
            raise ValueError("a message must be non-empty text")
        with translate_errors(), transaction(self._conn):
            return self._write_outbox(body, urgent=urgent, now=now, event_id=event_id, approval_id=approval_id)

    def last_send_at(self) -> int | None:
        """When the held (non-urgent) lane last sent; the gap counts from here. A batch that some
        channel has taken counts as sent for the gap, even while another channel still owes it."""
        value = self._scalar(
            """SELECT MAX(at) FROM (
                   SELECT MAX(sent_at) AS at FROM outbox_batches INDEXED BY outbox_batches_sent
                   WHERE state = 'sent' AND urgent = 0
                   UNION ALL
                   SELECT MIN(d.at) FROM outbox_batches b INDEXED BY outbox_batches_open
                   JOIN outbox_deliveries d ON d.batch_id = b.id AND d.state = 'sent'
                   WHERE b.state IN ('sending', 'retry') AND b.urgent = 0 GROUP BY b.id) AS sends"""
        )
        return None if value is None else int(value)

    def next_send_at(self, *, now: int) -> int | None:
        """When the dispatcher will next have something to send, or None if nothing is queued."""
        due: list[int] = []
        retry = self._open_batch_due()
        if retry is not None:
            due.append(max(now, retry))
        if self._scalar("SELECT 1 FROM outbox WHERE status = 'queued' AND urgent = 1 LIMIT 1"):
            due.append(now)
        if self._scalar("SELECT 1 FROM outbox WHERE status = 'queued' AND urgent = 0 LIMIT 1") and not (
            self._held_lane_blocked()
        ):
            last = self.last_send_at()
            due.append(now if last is None else max(now, last + self.options.outbox_gap))
        return min(due) if due else None

    def _held_lane_blocked(self) -> bool:
        """The held lane sends in order: a new batch waits while an open one has reached no channel yet.
        Once any channel has taken it, a channel that is down no longer holds the others back."""
        return bool(self._scalar(
            """SELECT 1 FROM outbox_batches b INDEXED BY outbox_batches_open
               WHERE b.state IN ('sending', 'retry') AND b.urgent = 0 AND NOT EXISTS (
                   SELECT 1 FROM outbox_deliveries d WHERE d.batch_id = b.id AND d.state = 'sent')
               LIMIT 1"""
        ))

    def dispatch(self, send: Send, *, now: int, at_most_once: bool = False, channel: str | None = None) -> int:
        """Send at most one batch; returns how many messages it delivered (0 if none was due or it failed)."""
        claimed = self._claim_batch_to_send(now, at_most_once, channel)
        if claimed is None:
            return 0
        batch_id, batch = claimed
        try:
            send(batch)
        except Exception as exc:  # a channel's own failure must not lose the batch
            error = str(exc) if isinstance(exc, SendError) else f"{type(exc).__name__}: {exc}"
            permanent = at_most_once or (isinstance(exc, SendError) and exc.permanent)
            if not permanent and batch.attempt >= self.options.max_send_attempts:
                error, permanent = f"gave up after {batch.attempt} attempts: {error}", True
            self._record_failure(batch_id, batch, now, error, permanent=permanent)
            return 0
        if not at_most_once:
            with translate_errors(), transaction(self._conn):
                self._mark_sent(batch_id, now)
        return len(batch.bodies)

    def dispatch_channels(self, channels: Sequence[OutboxChannel], *, now: int) -> int:
        """Send at most one batch to every channel, each under the batch's one idempotency key.

        Each channel's outcome is recorded as soon as it is known, so when one channel fails and the
        batch is retried, the channels that already took it are skipped rather than sent a second
        copy. An at-most-once channel is marked before its send and never retried. A channel counts
        its own failed tries and is given up on for the batch after max_send_attempts of them. Each
        channel gets the batches of a lane in order: one that still owes an earlier batch is not sent
        a later one yet (and that wait costs it no attempt), while the other channels go on. The batch
        is sent once every channel has taken it, failed once every channel is settled and one failed
        for good, and otherwise retried. Returns the messages delivered to every channel.
        """
        names = [channel.name for channel in channels]
        if not names:
            raise ValueError("dispatch_channels needs at least one channel")
        if len(set(names)) != len(names):
            raise ValueError(f"channel names must be unique, got {names}")
        claimed = self._claim_batch_to_send(now, False, ",".join(names))
        if claimed is None:
            return 0
        batch_id, batch = claimed
        records = self._delivery_records(batch_id)
        waiting = [channel for channel in channels if records.get(channel.name, ("retry", None, 0))[0] == "retry"]
        behind = {channel.name for channel in waiting if self._owes_earlier_batch(batch_id, channel.name)}
        if any(channel.at_most_once and channel.name not in behind for channel in waiting):
            with translate_errors(), transaction(self._conn):
                for channel in waiting:
                    if channel.at_most_once and channel.name not in behind:
                        self._record_delivery(batch_id, channel.name, "sent", now, None)
        transient: list[str] = []
        tries: list[int] = []  # the failed tries of each channel that failed now and will be retried
        for channel in waiting:
            if channel.name in behind:
                transient.append(f"{channel.name}: waiting for an earlier batch")
                continue
            try:
                channel.send(batch)
            except SendError as exc:
                error, permanent = str(exc), exc.permanent
            except Exception as exc:  # a channel's own failure must not lose the batch
                error, permanent = f"{type(exc).__name__}: {exc}", False
            else:
                if not channel.at_most_once:
                    with translate_errors(), transaction(self._conn):
                        self._record_delivery(batch_id, channel.name, "sent", now, None)
                continue
            attempts = records.get(channel.name, ("retry", None, 0))[2] + 1
            if not permanent and attempts >= self.options.max_send_attempts:
                # A channel that never recovers (a wrong address, a service gone) must not be retried for
                # ever, nor keep the batches after this one waiting for it: it is given up on, visibly.
                error, permanent = f"gave up after {attempts} attempts: {error}", True
            with translate_errors(), transaction(self._conn):
                if permanent or channel.at_most_once:
                    self._record_delivery(batch_id, channel.name, "failed", now, error)
                else:
                    self._record_delivery(batch_id, channel.name, "retry", now, error, attempts)
            if not (permanent or channel.at_most_once):
                transient.append(f"{channel.name}: {error}")
                tries.append(attempts)
        if transient:
            # Retried after the backoff of the most-tried failing channel; a batch that only waits for
            # an earlier one is looked at again when that one is retried.
            retry_at = now + self._backoff(max(tries)) if tries else self._earlier_retry_at(batch_id, now)
            self._record_failure(batch_id, batch, now, "; ".join(transient), permanent=False, retry_at=retry_at)
            return 0
        settled = self._deliveries(batch_id)
        failures = [f"{name}: {settled[name][1]}" for name in names if settled[name][0] == "failed"]
        if failures:
            self._record_failure(batch_id, batch, now, "; ".join(failures), permanent=True)
            return 0
        with translate_errors(), transaction(self._conn):
            self._mark_sent(batch_id, now)
        return len(batch.bodies)

    def _owes_earlier_batch(self, batch_id: int, channel: str) -> bool:
        """Whether an earlier open batch of the same lane has not yet reached this channel (sent or
        given up): it must get that one first."""
        return bool(self._scalar(
            """SELECT 1 FROM outbox_batches b INDEXED BY outbox_batches_open
               WHERE b.state IN ('sending', 'retry') AND b.id < ?
                 AND b.urgent = (SELECT urgent FROM outbox_batches WHERE id = ?)
                 AND NOT EXISTS (SELECT 1 FROM outbox_deliveries d WHERE d.batch_id = b.id AND d.channel = ?
                                 AND d.state IN ('sent', 'failed'))
               LIMIT 1""",
            (batch_id, batch_id, channel),
        ))

    def _earlier_retry_at(self, batch_id: int, now: int) -> int:
        """When the earliest open batch before this one is due again (at least a second from now)."""
        due = self._open_batch_due(before_id=batch_id)
        return max(now + 1, due if due is not None else now + self._backoff(1))

    def _open_batch_due(self, *, before_id: int | None = None) -> int | None:
        """When the soonest open batch (of those before before_id, if given) may be claimed again.

        A claim that lapses at claimed_until may be taken over one second later (the claim is live
        until then): answering claimed_until would have the dispatcher spin through that second."""
        due = self._scalar(
            """SELECT MIN(COALESCE(next_try_at, claimed_until + 1)) FROM outbox_batches INDEXED BY outbox_batches_open
               WHERE state IN ('sending', 'retry') AND (? IS NULL OR id < ?)""",
            (before_id, before_id),
        )
        return None if due is None else int(due)

    def deliveries(self, batch_key: str) -> dict[str, tuple[str, str | None]]:
        """Per channel, what it did with the batch: ('sent' | 'failed', error), or ('retry', its last
        error) for a channel that will be tried again."""
        batch_id = self._scalar("SELECT id FROM outbox_batches WHERE key = ?", (batch_key,))
        return {} if batch_id is None else self._deliveries(int(batch_id))

    def _deliveries(self, batch_id: int) -> dict[str, tuple[str, str | None]]:
        return {channel: (state, error) for channel, (state, error, _) in self._delivery_records(batch_id).items()}

    def _delivery_records(self, batch_id: int) -> dict[str, tuple[str, str | None, int]]:
        return {
            channel: (state, error, attempts)
            for channel, state, error, attempts in self._conn.execute(
                "SELECT channel, state, error, attempts FROM outbox_deliveries WHERE batch_id = ?", (batch_id,)
            )
        }

    def _record_delivery(
        self, batch_id: int, channel: str, state: str, now: int, error: str | None, attempts: int = 0
    ) -> None:
        self._conn.execute(
            """INSERT INTO outbox_deliveries (batch_id, channel, state, at, error, attempts) VALUES (?, ?, ?, ?, ?, ?)
               ON CONFLICT (batch_id, channel) DO UPDATE SET state = excluded.state, at = excluded.at,
                  error = excluded.error, attempts = CASE WHEN outbox_deliveries.attempts > excluded.attempts
                                        THEN outbox_deliveries.attempts ELSE excluded.attempts END""",
            (batch_id, channel, state, now, error, attempts),
        )

    def _claim_batch_to_send(self, now: int, at_most_once: bool, channel: str | None) -> tuple[int, Batch] | None:
        with translate_errors(), transaction(self._conn):
            open_batch = self._conn.execute(
                """SELECT id, key, urgent, attempts FROM outbox_batches INDEXED BY outbox_batches_open
                   WHERE state IN ('sending', 'retry')
                     AND ((state = 'retry' AND next_try_at <= ?) OR (state = 'sending' AND claimed_until < ?))
                   ORDER BY urgent DESC, id LIMIT 1""",
                (now, now),
            ).fetchall()
            if open_batch:
                batch_id, key, urgent, attempts = open_batch[0]
                self._conn.execute(
                    """UPDATE outbox_batches SET state = 'sending', attempts = attempts + 1, claimed_until = ?,
                       next_try_at = NULL WHERE id = ?""",
                    (now + self.options.send_timeout, batch_id),
                )
                rows = self._conn.execute(
                    "SELECT id, body, approval_id FROM outbox WHERE batch_id = ? ORDER BY id", (batch_id,)
                ).fetchall()
                attempt = attempts + 1
            else:
                rows = self._conn.execute(
                    "SELECT id, body, approval_id FROM outbox INDEXED BY outbox_queued WHERE status = 'queued' "
                    "AND urgent = 1 ORDER BY id"
                ).fetchall()
                urgent = 1 if rows else 0
                if not rows:
                    if self._held_lane_blocked():
                        return None
                    last = self.last_send_at()
                    if last is not None and now - last < self.options.outbox_gap:
                        return None
                    rows = self._conn.execute(
                        "SELECT id, body, approval_id FROM outbox INDEXED BY outbox_queued WHERE status = 'queued' "
                        "AND urgent = 0 "
                        "ORDER BY id"
                    ).fetchall()
                if not rows:
                    return None
                key = f"ob-{secrets.token_hex(6)}-{now}"
                batch_id = int(self._conn.execute(
                    """INSERT INTO outbox_batches (key, urgent, created_at, state, attempts, claimed_until, channel)
                       VALUES (?, ?, ?, 'sending', 1, ?, ?) RETURNING id""",
                    (key, urgent, now, now + self.options.send_timeout, channel),
                ).fetchall()[0][0])
                self._conn.executemany(
                    "UPDATE outbox SET status = 'sending', batch_id = ? WHERE id = ?",
                    [(batch_id, message_id) for message_id, _, _ in rows],
                )
                attempt = 1
            if at_most_once:
                self._mark_sent(batch_id, now)
            return batch_id, Batch(
                key=key, bodies=[body for _, body, _ in rows], urgent=bool(urgent), attempt=attempt,
                message_ids=[message_id for message_id, _, _ in rows],
                approval_ids=[approval for _, _, approval in rows],
            )

    def _mark_sent(self, batch_id: int, now: int) -> None:
        self._conn.execute(
            """UPDATE outbox_batches SET state = 'sent', sent_at = ?, claimed_until = NULL, last_error = NULL
               WHERE id = ?""",
            (now, batch_id),
        )
        self._conn.execute("UPDATE outbox SET status = 'sent', sent_at = ? WHERE batch_id = ?", (now, batch_id))

    def _record_failure(
        self, batch_id: int, batch: Batch, now: int, error: str, *, permanent: bool, retry_at: int | None = None
    ) -> None:
        with translate_errors(), transaction(self._conn):
            if permanent:
                self._conn.execute(
                    """UPDATE outbox_batches SET state = 'failed', last_error = ?, claimed_until = NULL,
                       next_try_at = NULL WHERE id = ?""",
                    (error, batch_id),
                )
                self._conn.execute("UPDATE outbox SET status = 'failed' WHERE batch_id = ?", (batch_id,))
            else:
                self._conn.execute(
                    """UPDATE outbox_batches SET state = 'retry', last_error = ?, claimed_until = NULL,
                       next_try_at = ? WHERE id = ? AND state = 'sending'""",
                    (error, now + self._backoff(batch.attempt) if retry_at is None else retry_at, batch_id),
                )

    def send_now(self, message_id: int, *, now: int) -> bool:
        """Move a message the send gap holds to the urgent lane, so it goes out at once (the owner's `send now`);
        the held lane's gap is not restarted by it. False when the message is not queued in the held lane
        (unknown, urgent already, or already sending, sent or failed): nothing changes."""
        with translate_errors(), transaction(self._conn):
            return bool(self._conn.execute(
                "UPDATE outbox SET urgent = 1 WHERE id = ? AND status = 'queued' AND urgent = 0 RETURNING id",
                (message_id,),
            ).fetchall())

    def oldest_queued_at(self) -> int | None:
        """When the oldest message still waiting to be sent was queued (the outbox's lag), or None."""
        value = self._scalar("SELECT MIN(created_at) FROM outbox WHERE status = 'queued'")
        return None if value is None else int(value)

    def outbox_messages(self, *, status: str | None = None, limit: int = 50) -> list[OutboxMessage]:
        """Newest first, with the batch's key, error and retry time."""
        clause = "WHERE o.status = ?" if status else ""
        params: tuple[Any, ...] = (status, limit) if status else (limit,)
        return [
            OutboxMessage(row[0], row[1], bool(row[2]), *row[3:])
            for row in self._conn.execute(
                f"""SELECT o.id, o.body, o.urgent, o.created_at, o.event_id, o.status, o.sent_at,
                           b.key, b.channel, b.last_error, b.next_try_at, o.approval_id
                    FROM outbox o LEFT JOIN outbox_batches b ON b.id = o.batch_id {clause}
                    ORDER BY o.id DESC LIMIT ?""",
                params,
            )
        ]

    def event_replies(self, event_id: int, *, limit: int = 50) -> list[OutboxMessage]:
        """The messages a run queued for one event (its replies), oldest first, read by the event's index."""
        return [
            OutboxMessage(row[0], row[1], bool(row[2]), *row[3:])
            for row in self._conn.execute(
                """SELECT o.id, o.body, o.urgent, o.created_at, o.event_id, o.status, o.sent_at,
                          b.key, b.channel, b.last_error, b.next_try_at, o.approval_id
                   FROM outbox o LEFT JOIN outbox_batches b ON b.id = o.batch_id
                   WHERE o.event_id = ? ORDER BY o.id LIMIT ?""",
                (event_id, limit),
            )
        ]

    def outbox_counts(self) -> dict[str, int]:
        counts = {"queued": 0, "sending": 0, "sent": 0, "failed": 0}
        counts.update({s: n for s, n in self._conn.execute("SELECT status, n FROM outbox_counts")})
        counts["retrying"] = int(self._scalar("SELECT COUNT(*) FROM outbox_batches WHERE state = 'retry'"))
        # Held past max_messages_per_hour: not in the outbox until the owner releases them (core/caps.py).
        counts["held"] = int(self._scalar(
            "SELECT COUNT(*) FROM held_messages INDEXED BY held_messages_waiting WHERE released_at IS NULL"))
        return counts
