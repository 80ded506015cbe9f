"""The paced outbox: held messages, at most one send per gap, an urgent lane, retries under one key.

Unlike the seed, the send does not happen inside the write transaction: holding SQLite's write
lock across a network call would stall every webhook ingest for as long as a channel takes. A
send is planned instead (plan_send claims a batch, state `sending`, with a claim deadline, and says
what each channel is to do with it), made outside any transaction by the engine's dispatcher
(console/runtime/dispatcher.py: the core never calls a channel), and its outcome recorded
(record_send). A dispatcher that dies mid-send leaves the batch to be retried under the same
idempotency key once the claim lapses: at-least-once, deduplicated by the channel. At-most-once marks
the batch sent before sending, and a failure is then final. dispatch(send) is the seed's one-callable
form of the same, still used where one function is the whole channel.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from console.core.base import SendError, StoreBase
from console.core.models import Batch, OutboxMessage

Send = Callable[[Batch], Any]


class ChannelTerms(Protocol):
    """What the outbox plans a channel's send by: its name (its deliveries are recorded under it) and whether
    it is sent at most once."""

    @property
    def name(self) -> str: ...

    @property
    def at_most_once(self) -> bool: ...


class OutboxChannel(ChannelTerms, Protocol):
    """Where a batch goes (console/edges/channels.py has the real ones). send raises SendError on failure.

    send either blocks until the batch is delivered (the dispatcher runs it off the event loop) or is a
    coroutine function (the phone channels: awaited on the engine's loop, where their HTTP session lives)."""

    def send(self, batch: Batch) -> Awaitable[None] | None: ...


@dataclass(frozen=True)
class SendPlan:
    """A batch claimed for sending (OutboxMixin.plan_send) and what each channel is to do with it."""

    batch_id: int
    batch: Batch
    channels: tuple[str, ...]   # every channel of the dispatch, in order
    send_to: tuple[str, ...]    # the channels to send it to now, in order
    behind: tuple[str, ...]     # owe an earlier batch of the lane: they wait, at no attempt's cost
    marked: tuple[str, ...]     # at-most-once channels of send_to, recorded as sent before their send
    tries: Mapping[str, int]    # the failed tries so far of each channel of send_to


@dataclass(frozen=True)
class ChannelOutcome:
    """What one channel did with a planned batch: delivered (error None), or failed, for now or for good."""

    channel: str
    error: str | None = None
    permanent: bool = False

    @classmethod
    def failed(cls, channel: str, exc: BaseException) -> ChannelOutcome:
        """A send's exception in words: a SendError says whether it is final; anything else is retried."""
        if isinstance(exc, SendError):
            return cls(channel, str(exc), exc.permanent)
        return cls(channel, f"{type(exc).__name__}: {exc}", False)


class OutboxMixin(StoreBase):
    def queue_message(
        self, body: str, *, now: int, urgent: bool = False, event_id: int | None = None, approval_id: str | None = None
    ) -> int:
        """Hold a message for the dispatcher. approval_id names the approval it announces: a phone channel
        sends it as a card with Yes / No buttons (an announcement always takes the urgent lane)."""
        if not isinstance(body, str) or not body.strip():
            raise ValueError("a message must be non-empty text")
        with self.write_transaction():
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
        """Send at most one batch through one callable; returns how many messages it delivered (0 if none was
        due or it failed). At-most-once marks the batch sent in the claim, before the send, and a failure is
        then final. The engine's dispatcher sends through its channels with plan_send and record_send instead."""
        with self.write_transaction():
            claimed = self._claim_batch(now, channel)
            if claimed is not None and at_most_once:
                self._mark_sent(claimed[0], now)
        if claimed is None:
            return 0
        batch_id, batch = claimed
        try:
            send(batch)
        except Exception as exc:  # a channel's own failure must not lose the batch
            failed = ChannelOutcome.failed(channel or "send", exc)
            assert failed.error is not None
            error, permanent = self._give_up(failed.error, at_most_once or failed.permanent, batch.attempt)
            with self.write_transaction():
                self._fail_batch(batch_id, batch, now, error, permanent=permanent)
            return 0
        if not at_most_once:
            with self.write_transaction():
                self._mark_sent(batch_id, now)
        return len(batch.bodies)

    def _give_up(self, error: str, permanent: bool, attempts: int) -> tuple[str, bool]:
        """The one give-up rule: a failure that is not final yet becomes final after max_send_attempts tries.

        A channel that never recovers (a wrong address, a service gone) must not be retried for ever, nor keep
        the batches after this one waiting for it: it is given up on, visibly."""
        if not permanent and attempts >= self.options.max_send_attempts:
            return f"gave up after {attempts} attempts: {error}", True
        return error, permanent

    def plan_send(self, channels: Sequence[ChannelTerms], *, now: int) -> SendPlan | None:
        """Claim the batch that is due (None: nothing is) and say what each channel is to do with it, in one
        transaction: the channels that still owe it and may have it now (send_to), the ones that must first get
        an earlier batch of the lane (behind: that wait costs them no attempt), and the at-most-once channels,
        which are recorded as sent here, before their send, and never retried. The caller sends, then reports
        each channel's outcome to record_send under this plan; every send carries the batch's one key."""
        names = [channel.name for channel in channels]
        if not names:
            raise ValueError("a send needs at least one channel")
        if len(set(names)) != len(names):
            raise ValueError(f"channel names must be unique, got {names}")
        at_most_once = {channel.name for channel in channels if channel.at_most_once}
        with self.write_transaction():
            claimed = self._claim_batch(now, ",".join(names))
            if claimed is None:
                return None
            batch_id, batch = claimed
            records = self._delivery_records(batch_id)
            waiting = [name for name in names if records.get(name, ("retry", None, 0))[0] == "retry"]
            behind = tuple(name for name in waiting if self._owes_earlier_batch(batch_id, name))
            send_to = tuple(name for name in waiting if name not in behind)
            marked = tuple(name for name in send_to if name in at_most_once)
            for name in marked:
                self._record_delivery(batch_id, name, "sent", now, None)
        return SendPlan(batch_id, batch, tuple(names), send_to, behind, marked,
                        {name: records[name][2] for name in send_to if name in records})

    def record_send(self, plan: SendPlan, outcomes: Sequence[ChannelOutcome], *, now: int, settle: bool = True) -> int:
        """Record what channels of a plan did with its batch, in one transaction, as soon as it is known: when one
        channel fails and the batch is retried, the channels that already took it are skipped rather than sent a
        second copy. A channel counts its own failed tries and is given up on for the batch after
        max_send_attempts of them. With settle (once every channel of send_to has reported), the batch is
        settled in the same transaction: sent once every channel has taken it, failed once every channel is
        settled and one failed for good, and otherwise retried. Returns the messages delivered to every channel
        (0 unless the batch was settled as sent)."""
        with self.write_transaction():
            for outcome in outcomes:
                self._record_outcome(plan, outcome, now)
            return self._settle(plan, now) if settle else 0

    def _record_outcome(self, plan: SendPlan, outcome: ChannelOutcome, now: int) -> None:
        if outcome.channel not in plan.send_to:
            raise ValueError(f"{outcome.channel} was not planned to send batch {plan.batch.key}")
        marked = outcome.channel in plan.marked
        if outcome.error is None:
            if not marked:  # an at-most-once channel was recorded as sent before its send
                self._record_delivery(plan.batch_id, outcome.channel, "sent", now, None)
            return
        attempts = plan.tries.get(outcome.channel, 0) + 1
        error, permanent = self._give_up(outcome.error, outcome.permanent, attempts)
        if permanent or marked:
            self._record_delivery(plan.batch_id, outcome.channel, "failed", now, error)
        else:
            self._record_delivery(plan.batch_id, outcome.channel, "retry", now, error, attempts)

    def _settle(self, plan: SendPlan, now: int) -> int:
        records = self._delivery_records(plan.batch_id)
        transient: list[str] = []
        tries: list[int] = []  # the failed tries of each channel that failed now and will be retried
        for name in plan.channels:
            if name in plan.behind:
                transient.append(f"{name}: waiting for an earlier batch")
            elif name in plan.send_to and records[name][0] == "retry":
                transient.append(f"{name}: {records[name][1]}")
                tries.append(records[name][2])
        if transient:
            # Retried after the backoff of the most-tried failing channel; a batch that only waits for
            # an earlier one is looked at again when that one is retried.
            retry_at = now + self._backoff(max(tries)) if tries else self._earlier_retry_at(plan.batch_id, now)
            self._fail_batch(plan.batch_id, plan.batch, now, "; ".join(transient), permanent=False, retry_at=retry_at)
            return 0
        failures = [f"{name}: {records[name][1]}" for name in plan.channels if records[name][0] == "failed"]
        if failures:
            self._fail_batch(plan.batch_id, plan.batch, now, "; ".join(failures), permanent=True)
            return 0
        self._mark_sent(plan.batch_id, now)
        return len(plan.batch.bodies)

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

    def _claim_batch(self, now: int, channel: str | None) -> tuple[int, Batch] | None:
        """Inside a write transaction: take the open batch that is due again, or make one of the queued messages
        (the urgent lane first; the held lane once the gap has passed and no earlier batch blocks it)."""
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
                "SELECT id, body, approval_id, reply_to, audience FROM outbox WHERE batch_id = ? ORDER BY id",
                (batch_id,),
            ).fetchall()
            attempt = attempts + 1
        else:
            rows = self._conn.execute(
                "SELECT id, body, approval_id, reply_to, audience FROM outbox INDEXED BY outbox_queued "
                "WHERE status = 'queued' "
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
                    "SELECT id, body, approval_id, reply_to, audience FROM outbox INDEXED BY outbox_queued "
                    "WHERE status = 'queued' AND urgent = 0 ORDER BY id"
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
                [(batch_id, row[0]) for row in rows],
            )
            attempt = 1
        return batch_id, Batch(
            key=key, bodies=[row[1] for row in rows], urgent=bool(urgent), attempt=attempt,
            message_ids=[row[0] for row in rows], approval_ids=[row[2] for row in rows],
            reply_tos=[row[3] for row in rows], audiences=[row[4] for row in rows],
        )

    def _mark_sent(self, batch_id: int, now: int) -> None:
        self._conn.execute(
            """UPDATE outbox_batches SET state = 'sent', sent_at = ?, claimed_until = NULL, last_error = NULL
               WHERE id = ?""",
            (now, batch_id),
        )
        self._conn.execute("UPDATE outbox SET status = 'sent', sent_at = ? WHERE batch_id = ?", (now, batch_id))

    def _fail_batch(
        self, batch_id: int, batch: Batch, now: int, error: str, *, permanent: bool, retry_at: int | None = None
    ) -> None:
        """Inside a write transaction: the batch failed for good, or is retried at retry_at (default: its backoff)."""
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
        with self.write_transaction():
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
