"""The inbox: ingest with a key the database refuses twice, claim under the lease, fenced finish."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from console.core.base import CHAT_SOURCES, RESERVED_SOURCES, StoreBase, dumps, loads
from console.core.errors import move_refusal
from console.core.models import (
    STATUSES,
    ApprovalDraft,
    Attempt,
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
from console.core.statements import (
    CLAIM_ONE,
    EVENT_COLUMNS,
    FRESH,
    IS_STORED,
    NOT_FRESH,
    SELECT_DUE_RETRY,
    SELECT_HAND_RETRY,
    SELECT_LOST,
)

MAX_KEY_CHARS = 512
# What a retry by hand brings back: a dead event, or one the owner discarded and thinks better of.
REVIVABLE = ("dead", "discarded")
# The orders the console can sort the whole inbox by, each read through an index: (status, id), (source, id).
SORT_ORDERS = ("id", "status", "source")


def sort_key(event: Event, order: str) -> tuple[Any, int]:
    """Where event stands in an order of events_in_order."""
    value: Any = event.id if order == "id" else getattr(event, order)
    return value, event.id


# What the owner may give up on: a dead event, or a pending one (a poison event backing off). A running event
# belongs to its worker.
DISCARDABLE = ("dead", "pending")


def _status_arms(
    status: str | None, common: list[str], common_params: list[Any], *, order: str,
    start: tuple[Any, int] | None, compare: str,
) -> list[tuple[list[str], list[Any]]]:
    """The parts whose union is the events of status (None: every status) meeting common, from start on in an
    order by (status, id) or by id (compare: how a row stands to start): the events in inbox_status_id, and the
    fresh ones when status may be pending. Each is (its WHERE terms, their parameters)."""
    kept = [NOT_FRESH, *(["status = ?"] if status is not None else []), *common]
    kept_params = [*([status] if status is not None else []), *common_params]
    if start is not None:
        kept.append(f"({order}, id) {compare} (?, ?)")
        kept_params += [start[0], start[1]]
    arms = [(kept, kept_params)]
    if status not in (None, "pending"):
        return arms
    fresh, fresh_params = [FRESH, *common], list(common_params)
    if start is not None:
        if order == "id":
            fresh.append(f"(id, id) {compare} (?, ?)")
            fresh.append(f"id {compare[0]}= ?")  # the same rows, as a range inbox_fresh can seek to
            fresh_params += [start[0], start[1], start[0]]
        elif start[0] == "pending":
            fresh.append(f"id {compare} ?")
            fresh_params.append(start[1])
        elif (start[0] > "pending") != (compare[0] == "<"):
            return arms  # every fresh event stands on the other side of start
    arms.append((fresh, fresh_params))
    return arms


def _union(arms: list[tuple[list[str], list[Any]]], ordered: str, limit: int) -> tuple[str, list[Any]]:
    """One SELECT of the first limit events in that order that the parts' terms pick, and its parameters (the
    caller orders and limits it again). Each part is ordered and limited on its own, so each is an index walk
    of at most limit rows, on both engines, and the union sorts at most limit rows a part."""
    if len(arms) == 1:
        ((where, params),) = arms
        return f"SELECT {EVENT_COLUMNS} FROM inbox WHERE {' AND '.join(where)}", params
    selects = [f"SELECT * FROM (SELECT {EVENT_COLUMNS} FROM inbox WHERE {' AND '.join(where)} {ordered} LIMIT ?) "
               f"AS part{number}" for number, (where, _) in enumerate(arms)]
    return " UNION ALL ".join(selects), [param for _, params in arms for param in (*params, limit)]



# A refused redelivery is counted in memory and written to its stored event (the duplicate ledger) inside this
# store's next write of the inbox's own flow (an ingest that stores, a claim, a finish), when the store closes, or
# at once when REFUSALS_HELD keys are waiting or the first of them waited REFUSAL_HOLD_SECONDS. A refusal then
# costs a read and nothing else; a crash can lose the tally of copies refused since the last write, never an event
# (the copy was refused because the event is already stored, durably).
REFUSALS_HELD = 1000
REFUSAL_HOLD_SECONDS = 5
# Refused copies not yet written: (source, source_id) -> (copies, when the last was refused).
RefusalTally = dict[tuple[str, str], tuple[int, int]]


# The deepest payload the inbox takes (a scalar is 0 deep, {} or [] 1). Every reader of a payload walks it
# recursively: json's encoder and decoder, dataclasses.asdict in `events --json` and `show --json`, the
# console's payload view; each spends one or two frames a level out of Python's 1000, from whatever depth
# it is called at. 100 leaves them a wide margin, and is deeper than any webhook payload (GitHub's, Stripe's
# and Slack's are under 15).
MAX_PAYLOAD_DEPTH = 100


def payload_depth(value: Any, *, stop_past: int | None = None) -> int:
    """How many containers deep value is. Iterative, so any depth can be measured; with stop_past the
    walk ends as soon as the depth passes it."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if stop_past is not None and deepest > stop_past:
            break
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def check_payload_shape(value: Any, what: str = "payload") -> None:
    """ValueError for a payload the inbox would not give back as it went in, or that its readers could
    not walk: nested deeper than MAX_PAYLOAD_DEPTH, or an object key that is not a string (json.dumps
    would turn 1 into "1", and let {1: a, "1": b} collide). One walk, without recursion; only containers go on
    its stack (a plain loop, not a generator per container: this runs on every ingest)."""
    if not isinstance(value, dict | list | tuple):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise ValueError(f"{what} is not JSON-serialisable: object key {key!r} is not a string")
            children: Iterable[Any] = item.values()
        else:
            children = item
        if depth > MAX_PAYLOAD_DEPTH:
            raise ValueError(f"{what} is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        for child in children:
            if isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1))


def event_from_row(row: Sequence[Any]) -> Event:
    """An Event from a row of statements.EVENT_COLUMNS."""
    return Event(
        id=row[0],
        source=row[1],
        source_id=row[2],
        payload=loads(row[3]),
        status=row[4],
        attempts=row[5],
        claim_gen=row[6],
        error=row[7],
        created_at=row[8],
        updated_at=row[9],
        next_attempt_at=row[10],
        duplicates=row[11],
        pruned_at=row[12],
        dead_reason=row[13],
        trace=row[14],
        failed_with=row[15],
    )


class InboxMixin(StoreBase):
    # --- ingest -------------------------------------------------------------------------------
    def encode_event(self, source: str, source_id: str, payload: Any, *, by_engine: bool = False) -> str:
        """Validate one event and return its payload as JSON text; ValueError says what is wrong.

        Every way in from outside (ingest, ingest_many, the webhook receiver) comes through here, so the
        sources the engine alone writes are refused here: an `approval` event answers an approval, and
        only the answer path (`approve`, the console) may write one. by_engine: the engine's own writer of
        such a source (a chat source's listener) is asking."""
        self.check_keys(source, source_id, by_engine=by_engine)
        return self.encode_payload(payload)

    def check_keys(self, source: str, source_id: str, *, by_engine: bool = False) -> None:
        """encode_event's checks of an event's key (source, source_id): ValueError says what is wrong."""
        if source in RESERVED_SOURCES and not by_engine:
            what = {"approval": "an approval's answer or expiry", "timer": "a timer's firing"}.get(
                source, "what its chat source's listener takes from the owner's chat")
            hint = " (answer with `agent-console approve REQUEST_ID yes|no`)" if source == "approval" else ""
            raise ValueError(f"source {source!r} is reserved: only the engine writes {what}{hint}")
        for name, value in (("source", source), ("source_id", source_id)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string")
            if len(value) > MAX_KEY_CHARS:
                raise ValueError(f"{name} is longer than {MAX_KEY_CHARS} characters")
            if "\x00" in value:
                raise ValueError(f"{name} must not contain a NUL character")
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"{name} contains a lone surrogate, which is not valid UTF-8") from exc

    def encode_payload(self, payload: Any) -> str:
        """encode_event's checks of a payload, and its JSON text: ValueError says what is wrong."""
        check_payload_shape(payload)
        try:
            text = dumps(payload)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload is not JSON-serialisable: {exc}") from exc
        try:
            size = len(text.encode("utf-8"))
            lone_surrogate = None
        except UnicodeEncodeError as exc:
            size = len(text.encode("utf-8", "surrogatepass"))
            lone_surrogate = exc
        if size > self.options.max_payload_bytes:
            raise ValueError(f"payload is {size} bytes, over the limit of {self.options.max_payload_bytes} bytes")
        if lone_surrogate is not None:
            raise ValueError("payload contains a lone surrogate, which is not valid UTF-8") from lone_surrogate
        return text

    def ingest(self, source: str, source_id: str, payload: Any, *, now: int) -> bool:
        """Store an event once. False means a copy was already stored (the duplicate is counted: in memory
        until this store's next write, see REFUSALS_HELD).

        A redelivery is the common case for webhooks: it is refused after its key's checks and a plain read. Its
        payload is not looked at (nothing of it is stored), so a bad payload under a stored key is refused as a
        copy, not as bad input."""
        self.check_keys(source, source_id)
        held = self._refused
        try:
            with self._backend.storage_errors():
                return self._ingest_one(source, source_id, payload, now)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _ingest_one(self, source: str, source_id: str, payload: Any, now: int) -> bool:
        """ingest's work once the key is checked. With no copies held to write, the backend may do it whole
        (Backend.try_ingest: SQLite, the key's read and the insert in one snapshot; PostgreSQL, one round trip).
        Otherwise, or when it declines: a plain read refuses a stored key (held, _hold_refusal), else one durable
        transaction stores the event and writes the held refusals."""
        if not self._refused:
            done = self._backend.try_ingest(source, source_id, lambda: self.encode_payload(payload), now)
            if done is not None:
                stored, mark = done
                if mark is not None:
                    raise move_refusal(*mark)
                if not stored:
                    self._hold_refusal(source, source_id, now)
                return stored
        if self._scalar(IS_STORED, (source, source_id)):
            self._hold_refusal(source, source_id, now)
            return False
        text = self.encode_payload(payload)
        with self.write_transaction():
            self._write_refusals()
            return self._insert_event(source, source_id, text, now)

    def ingest_many(self, items: Iterable[tuple[str, str, Any]], *, now: int) -> list[bool]:
        """Store many events in one transaction (one fsync). All are validated before any is written."""
        encoded = [(source, source_id, self.encode_event(source, source_id, payload))
                   for source, source_id, payload in items]
        if not encoded:
            return []
        held = self._refused
        try:
            with self._backend.storage_errors():
                return self._ingest_encoded(encoded, now)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _ingest_encoded(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        """ingest_many's one transaction: the backend's whole when it takes it (Backend.try_ingest_many; PostgreSQL,
        one round trip when every key is the call's only one of it) and no refused copies are held to write."""
        if not self._refused:
            done = self._backend.try_ingest_many(encoded, now)
            if done is not None:
                stored, mark = done
                if mark is not None:
                    raise move_refusal(*mark)
                return stored
        with self.write_transaction():
            self._write_refusals()
            return self._insert_events(encoded, now)

    # --- refused copies, counted in memory (REFUSALS_HELD) ------------------------------------------
    _refused: RefusalTally  # set empty by Store.__init__
    _refused_since = 0

    def _hold_refusal(self, source: str, source_id: str, now: int) -> None:
        if not self._refused:
            self._refused_since = now
        copies = self._refused.get((source, source_id), (0, now))[0]
        self._refused[source, source_id] = (copies + 1, now)
        if len(self._refused) >= REFUSALS_HELD or now - self._refused_since >= REFUSAL_HOLD_SECONDS:
            self.write_refusals()

    def write_refusals(self) -> None:
        """Write the refused copies counted in memory to their events now (close() does; so does any write of
        the inbox's flow on this store). Like their count before, it does not wait for an fsync."""
        if not self._refused:
            return
        held = self._refused
        try:
            with self.write_transaction(relaxed=True):
                self._write_refusals()
        except BaseException:
            self._keep_refusals(held)
            raise

    def _write_refusals(self) -> None:
        """Inside the caller's write transaction: the held tally goes into it (and out of memory)."""
        if self._refused:
            held, self._refused = self._refused, {}
            self._backend.count_refusals([(source, source_id, copies, last)
                                          for (source, source_id), (copies, last) in held.items()])

    def _keep_refusals(self, held: RefusalTally) -> None:
        """A transaction that took the held tally did not commit: put it back beside any counted since."""
        if held and held is not self._refused:
            for key, (copies, last) in self._refused.items():
                before = held.get(key, (0, last))[0]
                held[key] = (before + copies, last)
            self._refused = held

    def _with_refusals(self, events: list[Event]) -> list[Event]:
        """Events as this store sees them, its refused copies not yet written included."""
        if not self._refused:
            return events
        shown = []
        for event in events:
            held = self._refused.get((event.source, event.source_id))
            if held is not None:
                event = replace(event, duplicates=event.duplicates + held[0])
            shown.append(event)
        return shown

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
                return sorted((event_from_row(row) for row in rows), key=lambda event: event.id)
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
            return events

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
        blame: int | None = None,
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
            return self._finish(holder, gen, ids, outcome, now, error, blame)
        except BaseException:
            self._keep_refusals(held)
            raise

    def _finish(
        self, holder: str, gen: int, ids: Sequence[int], outcome: RunOutcome, now: int, error: str | None,
        blame: int | None,
    ) -> bool:
        # A run that succeeded and staged nothing, no copies held to write: the backend may finish it whole
        # (Backend.try_finish; PostgreSQL, one round trip), or decline having written nothing when it does not apply
        # (the lease or a move mark refuses it): then the shared path runs, records and says why.
        if (error is None and ids and not self._refused
                and not any(getattr(outcome, part.name) for part in fields(outcome))
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
                moved = sum(self._finish_failed(event_id, holder, gen, now, error)
                            if poison is None or event_id == poison
                            else self._spare_batch_mate(event_id, holder, gen, now, error, poison)
                            for event_id in ids)
                if moved:  # the calls a failed run made stand (journalled): the audit trail says so now
                    self._audit_failed_run(outcome.tool_calls, error, now)
            if error is None and (moved or not ids):
                commit_outcome(self, outcome, ids, now)
            return True

    def conversation_of(self, ids: Sequence[int]) -> str | None:
        """'<source>:<source id>' of the last chat-source message among these events (what a run's reply
        answers), or None when none came from a chat source."""
        if not ids:
            return None
        marks = ", ".join("?" for _ in ids)
        places = ", ".join("?" for _ in CHAT_SOURCES)
        row = self._conn.execute(
            f"""SELECT source, source_id FROM inbox WHERE id IN ({marks}) AND source IN ({places})
                ORDER BY id DESC LIMIT 1""",
            (*ids, *CHAT_SOURCES),
        ).fetchall()
        return f"{row[0][0]}:{row[0][1]}" if row else None

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

    # --- reading ------------------------------------------------------------------------------
    def events(
        self,
        *,
        status: str | None = None,
        source: str | None = None,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[Event]:
        """Newest first; page with before_id (older) or after_id (newer). Reads only the page."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}")
        conditions = (("source = ?", source), ("id < ?", before_id), ("id > ?", after_id))
        where = [condition for condition, value in conditions if value is not None]
        params: list[Any] = [value for _, value in conditions if value is not None]
        if status is None:
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            selected = f"SELECT {EVENT_COLUMNS} FROM inbox {clause}"
        else:
            selected, params = _union(_status_arms(status, where, params, order="id", start=None, compare=""),
                                      "ORDER BY id" if after_id is not None else "ORDER BY id DESC", int(limit))
        if after_id is not None:
            # Oldest-first just above after_id, then flipped, so the page is the one next to it.
            sql = f"SELECT * FROM ({selected} ORDER BY id LIMIT ?) AS page ORDER BY id DESC"
        else:
            sql = f"{selected} ORDER BY id DESC LIMIT ?"
        return self._with_refusals([event_from_row(r) for r in self._conn.execute(sql, (*params, int(limit)))])

    def events_in_order(
        self,
        *,
        order: str = "id",
        descending: bool = True,
        status: str | None = None,
        source: str | None = None,
        start: tuple[Any, int] | None = None,
        inclusive: bool = False,
        backwards: bool = False,
        limit: int = 100,
    ) -> list[Event]:
        """A run of events in the order the console shows them: by (order, id), both descending or both
        ascending; order is id, status or source (each has an index that reads in that order). From start
        on (a key as sort_key returns; after it, or from it with inclusive), or with backwards the rows just
        before it, still in display order. Reads only the rows it returns (keyset paging)."""
        sql, params = self.in_order_statement(order=order, descending=descending, status=status, source=source,
                                              start=start, inclusive=inclusive, backwards=backwards, limit=limit)
        events = self._with_refusals([event_from_row(row) for row in self._conn.execute(sql, params).fetchall()])
        return events[::-1] if backwards else events

    def in_order_statement(
        self,
        *,
        order: str = "id",
        descending: bool = True,
        status: str | None = None,
        source: str | None = None,
        start: tuple[Any, int] | None = None,
        inclusive: bool = False,
        backwards: bool = False,
        limit: int = 100,
    ) -> tuple[str, list[Any]]:
        """The statement events_in_order runs, and its parameters (tests read its plan: an index search, no sort)."""
        if order not in SORT_ORDERS:
            raise ValueError(f"unknown order {order!r}; expected one of {', '.join(SORT_ORDERS)}")
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; expected one of {', '.join(STATUSES)}")
        # Reading forwards in a descending order is reading downwards; backwards flips both.
        downwards = descending != backwards
        compare = ("<" if downwards else ">") + ("=" if inclusive and not backwards else "")
        direction = "DESC" if downwards else "ASC"
        ordered = f"ORDER BY id {direction}" if order == "id" else f"ORDER BY {order} {direction}, id {direction}"
        params: list[Any]
        if order != "source" and (status is not None or order == "status"):
            # By status, or one status by id: inbox_status_id and inbox_fresh (NOT_FRESH), merged in order.
            common = ["source = ?"] if source is not None else []
            selected, params = _union(_status_arms(status, common, [source] if source is not None else [],
                                                   order=order, start=start, compare=compare), ordered, int(limit))
        else:
            where = [condition for condition, value in (("status = ?", status), ("source = ?", source))
                     if value is not None]
            params = [value for value in (status, source) if value is not None]
            if start is not None:
                where.append(f"({order}, id) {compare} (?, ?)")
                params += [start[0], start[1]]
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            selected = f"SELECT {EVENT_COLUMNS} FROM inbox {clause}"
        return f"{selected} {ordered} LIMIT ?", [*params, int(limit)]

    def event(self, event_id: int) -> Event | None:
        for row in self._conn.execute(f"SELECT {EVENT_COLUMNS} FROM inbox WHERE id = ?", (event_id,)):
            return self._with_refusals([event_from_row(row)])[0]
        return None

    def find_event(self, source: str, source_id: str) -> Event | None:
        for row in self._conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM inbox WHERE source = ? AND source_id = ?", (source, source_id)
        ):
            return self._with_refusals([event_from_row(row)])[0]
        return None

    def history(self, event_id: int) -> list[Attempt]:
        return [
            Attempt(*row)
            for row in self._conn.execute(
                "SELECT event_id, at, kind, holder, gen, detail FROM attempts WHERE event_id = ? ORDER BY id",
                (event_id,),
            )
        ]

    def counts(self) -> dict[str, int]:
        return {status: n for status, n in self._conn.execute("SELECT status, n FROM inbox_counts")}

    def sources(self) -> list[str]:
        """Distinct sources, read by skipping through the (source, id) index, not scanning rows."""
        found: list[str] = []
        last = ""
        while True:
            row = self._scalar("SELECT source FROM inbox WHERE source > ? ORDER BY source LIMIT 1", (last,))
            if row is None:
                return found
            found.append(row)
            last = row

    def max_event_id(self) -> int:
        return int(self._scalar("SELECT COALESCE(MAX(id), 0) FROM inbox"))

    def first_ids_at(self, moments: Sequence[int]) -> list[int]:
        """For each moment, the smallest event id created at or after it (max id + 1 if none).

        Ids grow with arrival, so created_at rises with id; a bisection over the primary key finds
        each boundary in O(log n) point reads, and the difference of two boundaries counts the
        events between them, without an index on created_at or a scan of the rows in between.
        """
        low_id = int(self._scalar("SELECT COALESCE(MIN(id), 1) FROM inbox"))
        end = self.max_event_id() + 1
        found: list[int] = []
        for moment in moments:
            low, high = low_id, end
            while low < high:
                middle = (low + high) // 2
                probe = self._conn.execute(
                    "SELECT id, created_at FROM inbox WHERE id >= ? ORDER BY id LIMIT 1", (middle,)
                ).fetchall()
                if not probe or probe[0][1] >= moment:
                    high = middle
                else:
                    low = int(probe[0][0]) + 1
            found.append(low)
        return found

    # --- dead events ---------------------------------------------------------------------------
    def retry_dead(self, event_id: int, *, now: int) -> bool:
        """Return one dead event to pending with a fresh attempt budget."""
        with self.write_transaction():
            return self._revive(event_id, now, ("dead",))

    def retry_events(self, event_ids: Iterable[int], *, now: int) -> list[int]:
        """Return each dead or discarded event among event_ids to pending with a fresh attempt budget, in one
        transaction (the console's retry of a selection, `agent-console retry ID...`). Returns the ids that
        moved, in the order given; an unknown id or one in another state is left alone."""
        with self.write_transaction():
            return [event_id for event_id in dict.fromkeys(event_ids)
                    if self._revive(event_id, now, REVIVABLE)]

    def retry_dead_matching(self, *, source: str | None = None, now: int) -> int:
        """Return every dead event (of one source, if given) to pending. Returns how many."""
        with self.write_transaction():
            if source is None:
                ids = [r[0] for r in self._conn.execute(f"SELECT id FROM inbox WHERE status = 'dead' AND {NOT_FRESH}")]
            else:
                ids = [r[0] for r in self._conn.execute(
                    f"SELECT id FROM inbox WHERE status = 'dead' AND {NOT_FRESH} AND source = ?", (source,))]
            return sum(self._revive(event_id, now, ("dead",)) for event_id in ids)

    def count_dead(self, *, source: str | None = None) -> int:
        if source is None:
            return int(self._scalar("SELECT n FROM inbox_counts WHERE status = 'dead'"))
        return int(self._scalar(f"SELECT COUNT(*) FROM inbox WHERE status = 'dead' AND {NOT_FRESH} AND source = ?",
                                (source,)))

    def discard(self, event_ids: Iterable[int], *, now: int, reason: str | None = None) -> list[int]:
        """Give up on dead or pending events, in one transaction: they become `discarded`, are never claimed
        again, and stay for the record (their key still refuses a redelivery; their error, dead_reason and
        history stay; `retry` brings one back). A running event belongs to its worker and is left alone, as
        are done ones. Returns the ids that moved, in the order given."""
        moved: list[int] = []
        with self.write_transaction():
            for event_id in dict.fromkeys(event_ids):
                changed = self._conn.execute(
                    """UPDATE inbox SET status = 'discarded', claim_alone = 0, updated_at = ?
                       WHERE id = ? AND status IN (?, ?) RETURNING id""",
                    (now, event_id, *DISCARDABLE),
                ).fetchall()
                if changed:
                    self._log_attempt(event_id, now, "discard", None, None, reason or "discarded by hand")
                    moved.append(event_id)
        return moved

    def restore_to_dead(self, event_ids: Iterable[int], *, now: int) -> list[int]:
        """Undo a discard without running the event: each discarded event among event_ids is `dead` again, as it
        died (its error and dead_reason were kept; no fresh attempt budget), in one transaction. `retry` is what
        runs one. One retention cleared is left alone, as `retry` leaves it. Returns the ids that moved."""
        moved: list[int] = []
        with self.write_transaction():
            for event_id in dict.fromkeys(event_ids):
                changed = self._conn.execute(
                    """UPDATE inbox SET status = 'dead', updated_at = ?
                       WHERE id = ? AND status = 'discarded' AND pruned_at IS NULL RETURNING id""",
                    (now, event_id),
                ).fetchall()
                if changed:
                    self._log_attempt(event_id, now, "restore", None, None,
                                      "restored to dead by hand (was: discarded); not run")
                    moved.append(event_id)
        return moved

    def _revive(self, event_id: int, now: int, states: tuple[str, ...]) -> bool:
        """Return one event in one of states (dead, discarded) to pending; its history says what it was."""
        marks = ", ".join("?" for _ in states)
        found = self._conn.execute(
            # A discarded event retention cleared has no payload to run, nor the journal that stops a repeat.
            f"""SELECT status, dead_reason, attempts, error FROM inbox
                WHERE id = ? AND status IN ({marks}) AND pruned_at IS NULL""",
            (event_id, *states),
        ).fetchall()
        if not found:
            return False
        status, reason, attempts, error = found[0]
        changed = self._conn.execute(
            f"""UPDATE inbox SET status = 'pending', attempts = 0, next_attempt_at = 0, claim_gen = NULL,
                   claim_alone = 1, dead_reason = NULL, updated_at = ?
               WHERE id = ? AND status IN ({marks}) AND pruned_at IS NULL RETURNING id""",
            (now, event_id, *states),
        ).fetchall()
        if changed:
            was = death_in_words(reason, attempts, error)
            if status == "discarded":  # given up on while dead (its reason kept) or while still pending
                was = f"discarded; {was}" if reason is not None or error else "discarded"
            self._log_attempt(event_id, now, "retry", None, None, f"retried by hand (was: {was})")
        return bool(changed)
