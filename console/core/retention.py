"""Pruning: forget the bulk of finished work, keep everything the inbox's promises rest on.

An always-on agent's inbox grows for as long as it runs, and most of its bytes are payloads of events
that finished long ago, bodies of messages sent long ago and, for a model-backed agent, the replies its
journal keeps. Pruning clears those. It never deletes an event row: the row's (source, source_id) key is
what refuses a redelivery, and its status, attempts and history stay readable. An event the owner
discarded is finished as far as retention goes: cleared like a done one once discarded before the cutoff,
after which `retry` can no longer bring it back (its payload and the journal that stops a repeated side
effect are gone). Pending, running and dead events are never touched, nor is anything newer than the
cutoff, nor the last sent batch (the outbox's gap counts from it), nor any journal step or saved session
while an approval is unsettled (a resumed conversation reads them).

Work is done in short transactions of at most `chunk` rows, so a webhook delivery arriving meanwhile
waits for milliseconds, not for the whole prune. Freed pages are reused by new events; the file
itself does not shrink.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from console.core.base import StoreBase
from console.core.statements import NOT_FRESH

MIN_PRUNE_AGE = 86_400  # a mistyped age cannot wipe today's work; unsettled approvals are guarded apart


@dataclass(frozen=True)
class PruneReport:
    cutoff: int
    payloads_cleared: int
    messages_deleted: int
    batches_deleted: int
    steps_deleted: int = 0
    sessions_deleted: int = 0
    open_conversations: int = 0  # approvals not yet settled: while any is, no step or session is deleted
    audit_rows_deleted: int = 0  # the oldest rows of the audit trail (a `pruned` row and the anchor keep it checkable)


class RetentionMixin(StoreBase):
    def prune(self, *, older_than: int, now: int, chunk: int = 500, dry_run: bool = False) -> PruneReport:
        """Clear payloads of events done before now - older_than; delete messages sent before it, the
        journal steps of those events, the sessions of approvals settled before it and the audit trail's rows
        written before it (from the oldest on, leaving the anchor that keeps the rest checkable).

        dry_run counts what would go and changes nothing.
        """
        if older_than < MIN_PRUNE_AGE:
            raise ValueError(f"prune keeps at least a day of history: older_than must be >= {MIN_PRUNE_AGE} s")
        if chunk < 1:
            raise ValueError("chunk must be at least 1")
        cutoff = now - older_than
        # Ids grow with arrival: every event created before the cutoff has an id below this one.
        [end_id] = self.first_ids_at([cutoff])
        # A conversation waiting on an approval (or on its answer's run) replays its journalled steps
        # when it resumes, and may reach back to any earlier event of it: keep every step until none is.
        # A real prune counts them after clearing payloads (a discarded answer cleared there settles its
        # conversation); a dry run counts them as they stand, so it may say less would go than a prune deletes.
        if dry_run:
            open_conversations = int(self._scalar(_COUNT_OPEN_CONVERSATIONS))
            return PruneReport(
                cutoff,
                int(self._scalar(_COUNT_PAYLOADS, (end_id, cutoff))),
                int(self._scalar(_COUNT_MESSAGES, (cutoff,))),
                int(self._scalar(_COUNT_BATCHES, (cutoff,))),
                0 if open_conversations else int(self._scalar(_COUNT_STEPS, (end_id, cutoff))),
                0 if open_conversations else int(self._scalar(_COUNT_SESSIONS, (cutoff,))),
                open_conversations,
                self._count_audit_prunable(cutoff),
            )
        payloads = self._in_chunks(
            _SELECT_PAYLOADS, (end_id, cutoff), chunk,
            # Re-checked under the lock: the read that found the event took none.
            """UPDATE inbox SET payload = 'null', payload_crc32 = NULL, pruned_at = ?
               WHERE id = ? AND status IN ('done', 'discarded') AND updated_at < ? AND pruned_at IS NULL""",
            lambda event_id: (now, event_id, cutoff),
        )
        messages, batches = self._delete_sent(cutoff, chunk)
        if self._scalar("SELECT 1 FROM phone_answers WHERE at < ? LIMIT 1", (cutoff,)):
            with self.write_transaction():  # the answers phones gave, kept as long as messages
                self._conn.execute("DELETE FROM phone_answers WHERE at < ?", (cutoff,))
        if self._scalar("SELECT 1 FROM cap_uses WHERE at < ? LIMIT 1", (cutoff,)):
            with self.write_transaction():  # caps count an hour back; the cutoff is days
                self._conn.execute("DELETE FROM cap_uses WHERE at < ?", (cutoff,))
                self._conn.execute("DELETE FROM cap_notices WHERE at < ?", (cutoff,))
                self._conn.execute("DELETE FROM held_messages WHERE released_at < ?", (cutoff,))
        steps = sessions = 0
        open_conversations = int(self._scalar(_COUNT_OPEN_CONVERSATIONS))
        if not open_conversations:
            steps = self._in_chunks(_SELECT_STEP_EVENTS, (end_id, cutoff), chunk,
                                    "DELETE FROM journal WHERE event_id = ?", lambda event_id: (event_id,))
            settled = [row[0] for row in self._conn.execute(_SETTLED_SESSIONS, (cutoff,))]
            for start in range(0, len(settled), chunk):
                with self.write_transaction():
                    for session_id in settled[start:start + chunk]:
                        self._conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
                        sessions += self._conn.changes()
        audit_rows = self._prune_audit(cutoff, now, chunk)
        return PruneReport(cutoff, payloads, messages, batches, steps, sessions, open_conversations, audit_rows)

    def _in_chunks(self, select: str, bounds: tuple[int, ...], chunk: int, change: str,
                   params: Callable[[int], tuple[int, ...]]) -> int:
        """Find ids (in id order, after the last one done) with a read that takes no lock, then apply
        `change` to each in one short transaction per chunk. Returns the rows changed."""
        changed, after_id = 0, 0
        while True:
            ids = [row[0] for row in self._conn.execute(select, (after_id, *bounds, chunk))]
            if not ids:
                return changed
            with self.write_transaction():
                for found in ids:
                    self._conn.execute(change, params(found))
                    changed += self._conn.changes()
            after_id = ids[-1]

    def _delete_sent(self, cutoff: int, chunk: int) -> tuple[int, int]:
        messages = batches = 0
        while True:
            # A sent batch never changes again, so what this lock-free read finds is still there to delete.
            batch_ids = [row[0] for row in self._conn.execute(_SELECT_BATCHES, (cutoff, chunk))]
            if not batch_ids:
                return messages, batches
            with self.write_transaction():
                for batch_id in batch_ids:
                    self._conn.execute("DELETE FROM outbox_deliveries WHERE batch_id = ?", (batch_id,))
                    for table in ("phone_messages", "phone_pieces"):
                        self._conn.execute(
                            f"DELETE FROM {table} WHERE outbox_id IN (SELECT id FROM outbox WHERE batch_id = ?)",
                            (batch_id,),
                        )
                    self._conn.execute("DELETE FROM outbox WHERE batch_id = ?", (batch_id,))
                    messages += self._conn.changes()
                    self._conn.execute("DELETE FROM outbox_batches WHERE id = ?", (batch_id,))
                batches += len(batch_ids)


# Finished (done, or discarded by the owner) before the cutoff and not pruned yet, read by primary-key
# range: only events created before the cutoff (ids below end_id) can have finished before it.
_SELECT_PAYLOADS = f"""SELECT id FROM inbox
                      WHERE id > ? AND id < ? AND status IN ('done', 'discarded') AND {NOT_FRESH} AND updated_at < ?
                        AND pruned_at IS NULL
                      ORDER BY id LIMIT ?"""
_COUNT_PAYLOADS = f"""SELECT COUNT(*) FROM inbox
                     WHERE id < ? AND status IN ('done', 'discarded') AND {NOT_FRESH} AND updated_at < ?
                       AND pruned_at IS NULL"""
# Sent batches older than the cutoff, except the newest sent held batch: the gap counts from it.
_OLD_BATCHES = """FROM outbox_batches
                  WHERE state = 'sent' AND sent_at < ?
                    AND id IS NOT (SELECT MAX(id) FROM outbox_batches WHERE state = 'sent' AND urgent = 0)"""
_SELECT_BATCHES = f"SELECT id {_OLD_BATCHES} ORDER BY id LIMIT ?"
_COUNT_BATCHES = f"SELECT COUNT(*) {_OLD_BATCHES}"
_COUNT_MESSAGES = f"SELECT COUNT(*) FROM outbox WHERE batch_id IN (SELECT id {_OLD_BATCHES})"
# An approval is settled once its answer (or expiry) has run to the end: its answer event is done. Or the
# owner gave up on that event and retention has cleared it: discarded and pruned, it can never run (a
# discarded answer that could still be retried keeps the conversation open, as a dead one does).
_SETTLED_ANSWER = "(i.status = 'done' OR (i.status = 'discarded' AND i.pruned_at IS NOT NULL))"
_COUNT_OPEN_CONVERSATIONS = f"""SELECT COUNT(*) FROM approvals a
                                WHERE NOT EXISTS (SELECT 1 FROM inbox i WHERE i.source = 'approval'
                                                  AND i.source_id = a.request_id AND {_SETTLED_ANSWER})"""
# Events with journalled steps that finished (or were discarded) before the cutoff, read through the
# journal's event index.
_SELECT_STEP_EVENTS = """SELECT DISTINCT j.event_id FROM journal j INDEXED BY journal_event
                          JOIN inbox i ON i.id = j.event_id
                          WHERE j.event_id > ? AND j.event_id < ? AND i.status IN ('done', 'discarded')
                            AND i.updated_at < ?
                          ORDER BY j.event_id LIMIT ?"""
_COUNT_STEPS = """SELECT COUNT(*) FROM journal j INDEXED BY journal_event JOIN inbox i ON i.id = j.event_id
                  WHERE j.event_id < ? AND i.status IN ('done', 'discarded') AND i.updated_at < ?"""
# Saved sessions of approvals whose answer finished running before the cutoff.
_SETTLED_SESSIONS = f"""SELECT s.session_id FROM sessions s
                        JOIN inbox i ON i.source = 'approval' AND i.source_id = s.session_id
                        WHERE {_SETTLED_ANSWER} AND i.updated_at < ?"""
_COUNT_SESSIONS = f"SELECT COUNT(*) FROM ({_SETTLED_SESSIONS}) AS settled"
