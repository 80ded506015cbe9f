"""The drain: claim a batch under the lease, and the fenced finish of its run (done, failed, a batch-mate spared,
lost runs recovered, events out of attempts dead)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from console.core.base import CHAT_SOURCES, StoreBase, conversation_key, event_from_row, loads
from console.core.models import (
    PAYLOAD_DAMAGED,
    ApprovalDraft,
    CapNotice,
    Event,
    MemoryWrite,
    OutboxDraft,
    RunOutcome,
    TimerDraft,
    ToolCallRecord,
    death_in_words,
    failed_with_batch,
)
from console.core.outcome import commit_outcome
from console.core.statements import CLAIM_ONE, SELECT_DUE_RETRY, SELECT_HAND_RETRY, SELECT_LOST

# Tries of an answer's event that could not send its approved call, since its last retry by hand.
_COUNT_UNSENT = """SELECT COUNT(*) FROM attempts WHERE event_id = ? AND kind = 'unsent'
                   AND id > (SELECT COALESCE(MAX(id), 0) FROM attempts WHERE event_id = ? AND kind = 'retry')"""


# What a run can stage (RunOutcome's fields), named once: a finish asks whether any was staged on every call.
_OUTCOME_PARTS = tuple(part.name for part in fields(RunOutcome))


class DrainMixin(StoreBase):
    # --- claim and finish ---------------------------------------------------------------------
    def claim_batch(self, holder: str, gen: int, *, now: int) -> list[Event]:
        """Claim work for one run, under the lease (holder, gen).

        Rows left running by an older generation belong to a worker that lost its lease: they go
        back to pending (or dead once out of attempts). Attempts are counted here, at claim time,
        because a worker that crashes never records its failure. A due retry is claimed alone so a
        poison event cannot take healthy ones down with it; fresh events are claimed together, up to
        the batch cap.

        The claim commits without waiting for an fsync. It survives a crash of this process at once (the
        WAL frame is in the OS's cache), and a power cut from the run's first durable commit on (a
        journalled step, an answer, the outbox's claim of its reply, any acknowledged ingest): WAL frames
        become durable in order. A power cut before that can only undo a claim whose run has shown the
        world nothing; the event is claimed again, with one attempt fewer on its count.
        """
        held = self._refused
        try:
            return self._claim(holder, gen, now)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _claim(self, holder: str, gen: int, now: int) -> list[Event]:
        # No copies held to write: the backend may claim the usual batch whole (Backend.try_claim; PostgreSQL, one
        # round trip when only fresh events wait), or decline having written nothing: then the shared path runs.
        if not self._refused:
            rows = self._backend.try_claim(holder, gen, now, self.options.batch_cap)
            if rows is not None:
                events = sorted((event_from_row(row) for row in rows), key=lambda event: event.id)
                if any(event.damaged for event in events):
                    with self.write_transaction(relaxed=True):
                        if self._holds(holder, gen, now):
                            self._refuse_damaged(events, holder, gen, now)
                return [event for event in events if not event.damaged]
        with self.write_transaction(relaxed=True):
            self._write_refusals()
            if not self._holds(holder, gen, now):
                return []
            self._recover_lost(holder, gen, now)
            while True:
                retry = self._conn.execute(SELECT_DUE_RETRY, (now,)).fetchall()
                if not retry:
                    break
                event_id, attempts = retry[0]
                if attempts < self.options.max_attempts:
                    break
                self._mark_dead(event_id, now, "out_of_attempts", None, holder, gen)
            if not retry:
                retry = self._conn.execute(SELECT_HAND_RETRY).fetchall()
                event_id = retry[0][0] if retry else 0
            if retry:
                rows = self._conn.execute(CLAIM_ONE, (gen, now, event_id)).fetchall()
            else:
                rows = self._claim_fresh(gen, now)
            events = sorted((event_from_row(r) for r in rows), key=lambda e: e.id)  # RETURNING order is arbitrary
            self._log_attempts([(event.id, now, "claim", holder, gen, f"attempt {event.attempts}")
                                for event in events])
            self._refuse_damaged(events, holder, gen, now)
            return [event for event in events if not event.damaged]

    def _refuse_damaged(self, events: Sequence[Event], holder: str, gen: int, now: int) -> None:
        """The claimed events whose payload was found damaged are not run: each dies (`damaged`), its row kept for
        the owner to see (`status`, `show`, the console), inside the caller's fenced transaction."""
        for event in events:
            if event.damaged and self._conn.execute(
                    "SELECT 1 FROM inbox WHERE id = ? AND status = 'running' AND claim_gen = ?", (event.id, gen)
            ).fetchall():
                self._mark_dead(event.id, now, "damaged", PAYLOAD_DAMAGED, holder, gen)

    # How a batch is claimed, finished and logged is the backend's: one row a statement where a statement is a
    # function call (SQLite), one statement for the whole set where each is a round trip (PostgreSQL). They
    # run inside the caller's fenced transaction.
    def _claim_fresh(self, gen: int, now: int) -> list[Any]:
        """Claim up to a batch of fresh events (never tried, not set to run alone); their rows, any order."""
        return self._backend.claim_fresh(gen, now, self.options.batch_cap)

    def _finish_done(self, ids: Sequence[int], gen: int, now: int) -> set[int]:
        """Mark done those of ids still running under gen; the ids that moved."""
        return self._backend.finish_done(ids, gen, now)

    def _finish_failed(self, event_id: int, holder: str, gen: int, now: int, error: str) -> bool:
        """The run failed: back to pending after a backoff, or dead once out of attempts. False when the event
        is not running under gen (another generation has it, or it was listed twice)."""
        running = self._conn.execute(
            "SELECT attempts FROM inbox WHERE id = ? AND status = 'running' AND claim_gen = ?", (event_id, gen)
        ).fetchall()
        if not running:
            return False
        attempts = running[0][0]
        self._log_attempt(event_id, now, "error", holder, gen, error)
        if attempts >= self.options.max_attempts:
            self._mark_dead(event_id, now, "failed", error, holder, gen)
        else:
            self._conn.execute(
                "UPDATE inbox SET status = 'pending', error = ?, next_attempt_at = ?, updated_at = ? WHERE id = ?",
                (error, now + self._backoff(attempts), now, event_id),
            )
        return True

    def _answer_not_sent(self, event_id: int, holder: str, gen: int, now: int, error: str) -> bool:
        """The run of an answer's event could not send the approved call (its server unreachable): nothing
        happened, so the answer is not charged. It gives the claim's attempt back (keeping one, so it waits in
        the retry index) and is tried again after the run's backoff, counted in the tries that could not send,
        at least a second and never past its approval's deadline. A try at or past the deadline that still
        cannot send parks it dead (`unsent`), and the owner is told the call was not made and how to run it. False
        when the event is not running under gen."""
        running = self._conn.execute(
            """SELECT a.expires_at FROM inbox i LEFT JOIN approvals a ON a.request_id = i.source_id
               WHERE i.id = ? AND i.status = 'running' AND i.claim_gen = ? AND i.source = 'approval'""",
            (event_id, gen),
        ).fetchall()
        if not running:
            return self._finish_failed(event_id, holder, gen, now, error)
        deadline = running[0][0]
        if deadline is None or now >= deadline:
            self._log_attempt(event_id, now, "unsent", holder, gen, f"{error}; the approval's deadline has passed")
            self._mark_dead(event_id, now, "unsent", error, holder, gen)
            return True
        tries = int(self._scalar(_COUNT_UNSENT, (event_id, event_id)))
        retry_at = min(int(deadline), now + max(1, self._backoff(tries + 1)))
        self._log_attempt(event_id, now, "unsent", holder, gen,
                          f"{error}; attempt not counted, tried again in {retry_at - now} s (until the approval's "
                          f"deadline, in {int(deadline) - now} s)")
        self._conn.execute(
            """UPDATE inbox SET status = 'pending', attempts = CASE WHEN attempts > 1 THEN attempts - 1 ELSE 1 END,
                                error = ?, next_attempt_at = ?, updated_at = ? WHERE id = ?""",
            (error, retry_at, now, event_id),
        )
        return True

    def _spare_batch_mate(self, event_id: int, holder: str, gen: int, now: int, error: str, poison_id: int) -> bool:
        """The run failed on poison_id, not on this event: back to pending at once with the claim's attempt
        taken back and its own error untouched, to be claimed alone next. False when the event is not running
        under gen."""
        spared = self._conn.execute(
            """UPDATE inbox SET status = 'pending', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,
                              claim_alone = 1, failed_with = ?, updated_at = ?
               WHERE id = ? AND status = 'running' AND claim_gen = ? RETURNING id""",
            (poison_id, now, event_id, gen),
        ).fetchall()
        if spared:
            self._log_attempt(event_id, now, "batch", holder, gen,
                              f"{failed_with_batch(poison_id)}: {error}; attempt not counted, runs alone next")
        return bool(spared)

    def _recover_lost(self, holder: str, gen: int, now: int) -> None:
        lost = self._conn.execute(SELECT_LOST, (gen,)).fetchall()
        for event_id, attempts, old_gen, claimed_at in lost:
            reason = f"worker of generation {old_gen} lost its lease mid-run"
            self._log_attempt(event_id, now, "lost", holder, old_gen, reason)
            if attempts >= self.options.max_attempts:
                self._mark_dead(event_id, now, "lost", reason, holder, gen)
            else:
                self._conn.execute(
                    """UPDATE inbox SET status = 'pending', error = ?, next_attempt_at = ?, updated_at = ?
                       WHERE id = ?""",
                    # The backoff counts from the lost claim (a running row's updated_at is its claim), not from
                    # now: a takeover after a lapsed lease re-claims at once, while a crash loop still backs off.
                    (reason, claimed_at + self._backoff(attempts), now, event_id),
                )

    def _mark_dead(
        self, event_id: int, now: int, reason: str, error: str | None, holder: str | None, gen: int | None
    ) -> None:
        """The event dies for `reason` (one of DEAD_REASONS); error is its last error (None: keep the one it has)."""
        died = self._conn.execute(
            """UPDATE inbox SET status = 'dead', dead_reason = ?, error = COALESCE(?, error), updated_at = ?
               WHERE id = ? RETURNING attempts, error, source""",
            (reason, error, now, event_id),
        ).fetchall()
        attempts, last_error, source = died[0]
        self._log_attempt(event_id, now, "dead", holder, gen, death_in_words(reason, attempts, last_error))
        if source == "approval":  # the owner's answer will not reach its conversation: say so, in this transaction
            self._tell_of_stranded_answer(event_id, now)

    def finish(
        self,
        holder: str,
        gen: int,
        ids: Sequence[int],
        *,
        now: int,
        messages: Iterable[str | OutboxDraft] = (),
        error: str | None = None,
        approvals: Sequence[ApprovalDraft] = (),
        timers: Sequence[TimerDraft] = (),
        notes: Mapping[int, str] | None = None,
        memory: Sequence[MemoryWrite] = (),
        tool_calls: Sequence[ToolCallRecord] = (),
        notices: Sequence[CapNotice] = (),
        blame: int | None = None,
    ) -> bool:
        """Record a run's outcome and queue its messages, in one fenced transaction (finish_run with the
        outcome these keywords make: a message may be plain text, an OutboxDraft otherwise)."""
        drafts = [OutboxDraft(m) if isinstance(m, str) else m for m in messages]
        outcome = RunOutcome(drafts, approvals, timers, notes or {}, memory, tool_calls, notices)
        return self.finish_run(holder, gen, ids, outcome, now=now, error=error, blame=blame)

    def finish_run(
        self, holder: str, gen: int, ids: Sequence[int], outcome: RunOutcome, *, now: int, error: str | None = None,
        blame: int | None = None, not_sent: bool = False,
    ) -> bool:
        """Record a run's outcome and queue its messages, in one fenced transaction.

        Everything else the run produced for the inbox commits here too, or not at all: the approvals it
        asked for (with their saved sessions and expiry timers), the timers it set, what it remembered or forgot,
        and the record of its tool calls. A run that fails,
        crashes or is fenced leaves nothing half-asked; its retry asks again under the same ids.

        notes (event id -> text) become the detail of those events' finish in their history: how the run
        ended for them when `done` alone would hide it (the model declined, say).

        blame: the event a failed run failed on, as its agent named it (a poison event). When it is one of
        several ids, it alone is charged (the error, the backoff, dead once out of attempts); its batch-mates
        go back to pending with the claim's attempt taken back and no error of theirs, say why (failed_with,
        their history), and each runs alone next. Without it, or naming no event of the batch, every event
        is charged and retried alone after its backoff, as the run's failure may be any of theirs.

        not_sent: the run failed because the approved call of the blamed event (an answer) could not be sent,
        its server unreachable. Nothing happened, so that event is not charged: it waits, tried again with the
        backoff until its approval's deadline, and is then parked dead for the owner to retry
        (`_answer_not_sent`).

        Messages count against max_messages_per_hour and past it are held (console/core/caps.py); notices
        (a cap the run reached) are queued once per crossing.

        Refused (False, and recorded) unless holder still holds the lease in generation gen. Only
        events still running under gen change; messages are queued only on success, and only when
        this finish moved at least one event (or the run had none), so a finish can never queue a
        second reply for an event another generation already finished.

        Like a claim, a finish commits without waiting for an fsync: nothing in it has reached the
        outside world yet. Its messages are sent only after the dispatcher's claim of them commits
        with an fsync, and WAL frames become durable in order, so that fsync hardens this finish
        first. A power cut before it can only leave the inbox as a crash just before the finish
        would: the event runs again, its journalled steps are skipped, and nothing was sent twice.
        """
        held = self._refused
        try:
            return self._finish(holder, gen, ids, outcome, now, error, blame, not_sent)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _finish(
        self, holder: str, gen: int, ids: Sequence[int], outcome: RunOutcome, now: int, error: str | None,
        blame: int | None, not_sent: bool = False,
    ) -> bool:
        # A run that succeeded and staged nothing, no copies held to write: the backend may finish it whole
        # (Backend.try_finish; PostgreSQL, one round trip), or decline having written nothing when it does not apply
        # (the lease or a move mark refuses it): then the shared path runs, records and says why.
        if (error is None and ids and not self._refused
                and not any(getattr(outcome, part) for part in _OUTCOME_PARTS)
                and self._backend.try_finish(holder, gen, list(dict.fromkeys(ids)), now)):
            return True
        with self.write_transaction(relaxed=True):
            self._write_refusals()
            if not self._holds(holder, gen, now):
                self._record_fenced("finish", holder, gen, now, ids)
                return False
            if error is None:
                done = self._finish_done(ids, gen, now)
                self._log_attempts([(event_id, now, "finish", holder, gen, outcome.notes.get(event_id))
                                    for event_id in dict.fromkeys(ids) if event_id in done])
                moved = len(done)
            else:
                poison = blame if blame in ids and len(set(ids)) > 1 else None
                unsent = blame if not_sent and blame in ids else None
                moved = sum(self._answer_not_sent(event_id, holder, gen, now, error) if event_id == unsent
                            else self._finish_failed(event_id, holder, gen, now, error)
                            if poison is None or event_id == poison
                            else self._spare_batch_mate(event_id, holder, gen, now, error, poison)
                            for event_id in ids)
                if moved:  # the calls a failed run made stand (journalled): the audit trail says so now
                    self._audit_failed_run(outcome.tool_calls, error, now)
            if error is None and (moved or not ids):
                commit_outcome(self, outcome, ids, now)
            return True

    def conversation_of(self, ids: Sequence[int]) -> str | None:
        """'<source>:<source id>' of the last chat-source message among these events (what a run's reply answers)
        when every one of them came from that one conversation (conversation_key); None otherwise: the reply
        goes to the owner's own channels, never into a chat some of the run's events did not come from."""
        wanted = set(ids)
        if not wanted:
            return None
        marks = ", ".join("?" for _ in wanted)
        places = ", ".join("?" for _ in CHAT_SOURCES)
        rows = self._conn.execute(
            f"""SELECT id, source, source_id, payload FROM inbox WHERE id IN ({marks}) AND source IN ({places})
                ORDER BY id""",
            (*wanted, *CHAT_SOURCES),
        ).fetchall()
        keys = {conversation_key(source, source_id, loads(payload)) for _, source, source_id, payload in rows}
        if len(rows) != len(wanted) or len(keys) != 1:
            return None
        return f"{rows[-1][1]}:{rows[-1][2]}"

    def explain_claim(self) -> dict[str, list[str]]:
        """The query plans of claim_batch's statements (for tests and benchmarks: claiming must read
        only what it claims, never scan the inbox)."""
        return {name: self.query_plan(sql, params) for name, (sql, params) in self._claim_statements().items()}

    def _claim_statements(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """claim_batch's statements by name, with sample parameters."""
        return {
            "lost": (SELECT_LOST, (1,)),
            "due_retry": (SELECT_DUE_RETRY, (0,)),
            "hand_retry": (SELECT_HAND_RETRY, ()),
            "claim_one": (CLAIM_ONE, (1, 0, 1)),
            "claim_fresh": self._backend.claim_fresh_statement(),
        }

    def query_plan(self, sql: str, params: Any = ()) -> list[str]:
        """How the engine will run a statement, one line per step (SQLite's EXPLAIN QUERY PLAN, PostgreSQL's
        EXPLAIN without running it)."""
        return self._backend.query_plan(sql, params)
