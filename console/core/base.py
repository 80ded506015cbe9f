"""What every part of the Store shares: the connection, the settings, and the lease check."""

from __future__ import annotations

import json
import json.encoder
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from console.core.backend import AttemptEntry, Backend, Connection
from console.core.models import (
    ApprovalDraft,
    Event,
    Lease,
    MemoryWrite,
    ScheduleDraft,
    ScheduleUpdate,
    StrandedAnswer,
    ToolCallRecord,
)
from console.core.options import StoreOptions
from console.core.statements import INSERT_EVENT, LOG_ATTEMPT, payload_checksum

# Sources only the engine writes: an approval's answer or expiry, a timer's firing. Nothing from outside
# (ingest, a webhook, a timer's fixed key) may write them, or it could answer an approval or fake a tick. A chat
# source's events carry whether the paired owner wrote them, which only its listener may say.
RESERVED_SOURCES = ("approval", "timer", "telegram", "email")
# The chat sources: a run whose batch holds one of their messages answers in that chat (the outbox's reply_to).
CHAT_SOURCES = ("telegram", "email")


def conversation_key(source: str, source_id: str, payload: Any) -> str | None:
    """The conversation an event belongs to, where a reply to it would go: a chat source's chat ('telegram:<chat
    id>'), an e-mail's sender ('email:<address>', else the message itself); None for every other source (its run's
    messages go to the owner's own channels). A run never holds two conversations (Worker), and a reply goes back
    to one only when every event of the run came from it (conversation_of): the owner's private question batched
    with a group's message must not be answered in the group."""
    if source == "email":
        sender = payload.get("from") if isinstance(payload, Mapping) else None
        address = sender.get("address") if isinstance(sender, Mapping) else None
        return f"email:{address.lower()}" if isinstance(address, str) and address else f"email:{source_id}"
    if source in CHAT_SOURCES:
        return f"{source}:{source_id.split(':', 1)[0]}"
    return None


class SendError(Exception):
    """Raised by a channel's send. permanent=True (a 4xx, say) marks the batch failed for good."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class StaleGeneration(Exception):
    """A worker acted under a lease generation that has since been replaced (or has lapsed): the write
    was refused and recorded, and the run that made it must stop: nothing it does later counts."""


class OutcomeUnknown(Exception):
    """A world-changing step's call was sent and its answer never came (a timeout, a lost connection, a
    server or an engine that died mid-call): it may or may not have happened. Raised by a step's function to
    say so, and by run_once for a step already recorded so; the journal keeps the step `unknown`."""


# One encoder for every call: json.dumps with options builds a new JSONEncoder each time (a third of its cost
# on an ordinary webhook payload).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


# A payload that passed intake.check_payload_shape holds no cycle (one would nest past MAX_PAYLOAD_DEPTH), so its
# encoding needs no table of the containers seen (the circular check: a dict kept per call). The encoder object is
# built once and, without that table, holds no state between calls (any thread may use it).
_MAKE_ENCODER: Callable[..., Callable[[Any, int], Sequence[str]]] | None = getattr(json.encoder, "c_make_encoder", None)
_SHAPED = (_MAKE_ENCODER(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
           if _MAKE_ENCODER is not None else None)


def dumps_shaped(value: Any) -> str:
    """dumps for a value intake.check_payload_shape has passed: the same text, a third cheaper."""
    if _SHAPED is None:
        return _ENCODER.encode(value)
    if isinstance(value, str):
        return json.encoder.encode_basestring(value)
    return "".join(_SHAPED(value, 0))


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# Refused copies not yet written: (source, source_id) -> (copies, when the last was refused) (core/intake.py).
RefusalTally = dict[tuple[str, str], tuple[int, int]]


def stored_payload(stored: bytes | str | None, checksum: int | None) -> tuple[Any, bool]:
    """A payload as read (statements.PAYLOAD_AS_STORED: SQLite's bytes, PostgreSQL's text) and whether it is damaged:
    its bytes are not those its insert took the checksum of, or (a row stored before checksums, none to compare)
    they are no longer UTF-8 JSON. A damaged payload is None: none of it is handed on."""
    if stored is None:
        return None, False
    if isinstance(stored, bytes):
        if checksum is not None and zlib.crc32(stored) != checksum:
            return None, True
        try:
            text = stored.decode("utf-8")
        except UnicodeDecodeError:
            return None, True
    else:
        text = stored
        if checksum is not None and payload_checksum(text) != checksum:
            return None, True
    try:
        return json.loads(text), False
    except ValueError:
        return None, True


def event_from_row(row: Sequence[Any]) -> Event:
    """An Event from a row of statements.EVENT_COLUMNS."""
    payload, damaged = stored_payload(row[3], row[16])
    return Event(
        id=row[0],
        source=row[1],
        source_id=row[2],
        payload=payload,
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
        damaged=damaged,
    )


def one(conn: Any, sql: str, params: Any = ()) -> Any:
    """The first column of the first row, or None."""
    for row in conn.execute(sql, params):
        return row[0]
    return None


class StoreBase:
    _backend: Backend
    _conn: Connection  # the backend's connection, which the core's SQL runs on
    path: str
    options: StoreOptions
    _rng: random.Random
    _refused: RefusalTally  # refused copies counted in memory (core/intake.py), set empty by Store.__init__

    def write_transaction(self, *, guarded: bool = True, relaxed: bool = False) -> AbstractContextManager[object]:
        """A write transaction on this inbox (Backend.write_transaction), the storage's run-time errors as
        StoreUnavailable: every write of the core is in one."""
        return self._backend.write_transaction(guarded=guarded, relaxed=relaxed)

    def _lease_row(self) -> Lease | None:
        for holder, gen, until, acquired_at, renewed_at in self._conn.execute(
            "SELECT holder, gen, until, acquired_at, renewed_at FROM lease WHERE one = 1"
        ):
            return Lease(holder, gen, until, acquired_at, renewed_at)
        return None

    def _holds(self, holder: str | None, gen: int, now: int) -> bool:
        """(holder, gen) holds a live lease; holder None checks the generation alone."""
        lease = self._lease_row()
        return (lease is not None and lease.gen == gen and lease.until >= now
                and (holder is None or lease.holder == holder))

    def _holds_generation(self, holder: str | None, gen: int) -> bool:
        """No newer generation exists: the lease row is still (holder, gen), lapsed or not. Nobody else
        can have written anything under the lease since, so recording what this generation did (a step's
        result) is safe, and it is what stops a repeat of an effect that has already happened."""
        lease = self._lease_row()
        return lease is not None and lease.gen == gen and (holder is None or lease.holder == holder)

    def _record_fenced(
        self, kind: str, holder: str | None, gen: int, now: int, event_ids: Sequence[int], detail: str | None = None
    ) -> str:
        """Record a refused write of a stale run (inside the caller's transaction); returns the reason."""
        lease = self._lease_row()
        if lease is None:
            reason = "no lease is held"
        elif lease.gen == gen and (holder is None or lease.holder == holder):
            reason = "lease expired"
        else:
            reason = "lease held by another generation"
        self._conn.execute(
            """INSERT INTO refused_finishes
               (at, holder, gen, event_ids, lease_holder, lease_gen, reason, kind, detail)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (now, holder or "?", gen, dumps(list(event_ids)), lease.holder if lease else None,
             lease.gen if lease else None, reason, kind, detail),
        )
        said = reason if kind == "finish" else f"{kind} of {detail}: {reason}"
        for event_id in event_ids:
            self._log_attempt(event_id, now, "refused", holder, gen, said)
        return reason

    def _listener_refused(self, holder: str | None, gen: int | None, now: int, channel: str) -> str | None:
        """Inside a listener's write transaction (a chat source's or the mail listener's): why the write is refused,
        recorded as a refused write of kind 'listen', or None when (holder, gen) holds a live lease. Only the lease
        holder listens; one whose engine lost the lease while its read was under way writes nothing. holder None
        (a test, a tool writing by hand) is not fenced."""
        if holder is None or gen is None or self._holds(holder, gen, now):
            return None
        return self._record_fenced("listen", holder, gen, now, [], channel)

    def _take_kept(self, kept: Sequence[tuple[str, int]], now: int) -> None:
        """Mark these kept webhook updates (source, update id) taken, inside the listener's write that takes them
        (ChatMixin)."""
        raise NotImplementedError

    def conversation_of(self, ids: Sequence[int]) -> str | None:
        """The chat a batch's events came from, if any: where a run's reply goes (InboxMixin)."""
        raise NotImplementedError

    def _insert_approval(self, draft: ApprovalDraft, now: int, session_id: str | None) -> bool:
        """Store an approval request; False when one with its id already stands (ApprovalsMixin)."""
        raise NotImplementedError

    def _write_session(self, session_id: str, state: Any, now: int) -> None:
        """The one writer of a paused conversation (JournalMixin)."""
        raise NotImplementedError

    def _timer_values(
        self,
        timer_id: str,
        due: int,
        payload: Mapping[str, Any] | None = None,
        *,
        every: int | None = None,
        cron: str | None = None,
        tz: str | None = None,
        catch_up: str = "coalesce",
        key: tuple[str, str] | None = None,
        each_cap: int = 100,
        now: int | None = None,
        reserved: bool = False,
    ) -> tuple[Any, ...]:
        """A timer's row, checked (ValueError says what is wrong) (TimersMixin)."""
        raise NotImplementedError

    def _write_timer(self, row: tuple[Any, ...], origin: Any = None, ends_at: int | None = None) -> None:
        """The one writer of a timer's row (TimersMixin)."""
        raise NotImplementedError

    def _write_schedule(self, draft: ScheduleDraft, now: int) -> None:
        """The one writer of a schedule and its timer (SchedulesMixin)."""
        raise NotImplementedError

    def _update_schedule(self, update: ScheduleUpdate, now: int) -> None:
        """What an occurrence's run decided about its schedule (SchedulesMixin)."""
        raise NotImplementedError

    def _write_memory(self, write: MemoryWrite, now: int) -> None:
        """The one writer of a memory entry (MemoryMixin)."""
        raise NotImplementedError

    def _write_tool_call(self, call: ToolCallRecord, now: int) -> None:
        """The one writer of a tool call's record (MemoryMixin)."""
        raise NotImplementedError

    def _audit_calls(self, calls: Sequence[ToolCallRecord], now: int, *, failed: str | None = None) -> None:
        """The audit rows of the calls a run made in the world (AuditMixin)."""
        raise NotImplementedError

    # --- what one part of the Store asks of another ----------------------------------------------------------
    # Every mixin derives from StoreBase alone; a method one of them (or commit_outcome) calls on another is
    # declared here, its one body in the mixin named, which the Store (listing every mixin) supplies. mypy holds
    # each body to its declaration.
    def encode_event(self, source: str, source_id: str, payload: Any, *, by_engine: bool = False) -> str:
        """Validate one event and return its payload as JSON text (IntakeMixin)."""
        raise NotImplementedError

    def _write_refusals(self) -> None:
        """Inside the caller's write transaction: the refused copies held in memory are written (IntakeMixin)."""
        raise NotImplementedError

    def _keep_refusals(self, held: RefusalTally) -> None:
        """A transaction that took the held tally did not commit: put it back (IntakeMixin)."""
        raise NotImplementedError

    def _with_refusals(self, events: list[Event]) -> list[Event]:
        """Events as this store sees them, its refused copies not yet written included (IntakeMixin)."""
        raise NotImplementedError

    def first_ids_at(self, moments: Sequence[int]) -> list[int]:
        """For each moment, the smallest event id created at or after it (InboxMixin)."""
        raise NotImplementedError

    def _answer(self, request_id: str, answer: str, now: int, via: str) -> tuple[str, bool]:
        """The one answer path, inside the caller's transaction (ApprovalsMixin)."""
        raise NotImplementedError

    def _settle_approval(self, request_id: str, now: int, via: str) -> str | None:
        """Mirror the outcome that stands onto the approval and drop its expiry timer (TimersMixin)."""
        raise NotImplementedError

    def _audit_answer(self, request_id: str, answer: str, via: str, now: int) -> None:
        """An approval's answer in the audit trail, written with the answer that settles it (AuditMixin)."""
        raise NotImplementedError

    def _audit_stranded(self, stranded: StrandedAnswer, now: int) -> None:
        """An approved call whose answer's event died, in the audit trail (AuditMixin)."""
        raise NotImplementedError

    def _count_audit_prunable(self, cutoff: int) -> int:
        """Audit rows written before cutoff that pruning may delete (AuditMixin)."""
        raise NotImplementedError

    def _prune_audit(self, cutoff: int, now: int, chunk: int) -> int:
        """Delete the audit rows written before cutoff, keeping the chain checkable (AuditMixin)."""
        raise NotImplementedError

    def _tell_of_stranded_answer(self, event_id: int, now: int) -> None:
        """Tell the owner an answer's event died (inside the caller's transaction; StrandedMixin does it)."""
        raise NotImplementedError

    def _audit_failed_run(self, tool_calls: Sequence[ToolCallRecord], error: str, now: int) -> None:
        """Write the audit rows of the calls a failed run made in the world, inside its finish (AuditMixin)."""
        raise NotImplementedError

    def _audit_egress(self, server: str, refused: dict[str, int], now: int) -> None:
        """Connections an MCP server's egress proxy refused, by host, in the audit trail (AuditMixin)."""
        raise NotImplementedError

    def _backoff(self, attempts: int) -> int:
        """Seconds before attempt number attempts+1 may be claimed: exponential, capped, jittered."""
        if self.options.backoff_base <= 0:
            return 0
        delay = min(self.options.backoff_max, self.options.backoff_base * 2 ** max(0, attempts - 1))
        spread = delay * self.options.backoff_jitter
        return max(0, round(float(delay) + self._rng.uniform(-spread, spread)))

    def _write_outbox(
        self, body: str, *, urgent: bool, now: int, event_id: int | None, approval_id: str | None = None,
        reply_to: str | None = None, audience: str | None = None,
    ) -> int:
        """The one writer of an outbox row (inside the caller's transaction); returns its id.

        A message that announces an approval (approval_id) or answers a chat (reply_to) always takes the
        urgent lane: the owner waits on it."""
        return int(self._conn.execute(
            "INSERT INTO outbox (body, urgent, created_at, event_id, approval_id, reply_to, audience) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (body, int(urgent or approval_id is not None or reply_to is not None), now, event_id, approval_id,
             reply_to, audience),
        ).fetchall()[0][0])

    def _insert_event(self, source: str, source_id: str, text: str, now: int, trace: str | None = None) -> bool:
        """Insert an event, or count a refused copy of it (the duplicate ledger). True when it is new. trace: the
        context a new event keeps (a webhook delivery's, telemetry.context_to_keep).

        Every way into the inbox (ingest, timers, approval answers and expiries) goes through here."""
        # Read to its end, not returned from inside the loop: the statement must be finished before COMMIT,
        # whoever else still holds its cursor (tests/core/test_cursor_lifetime.py).
        ((duplicates,),) = self._conn.execute(INSERT_EVENT, (source, source_id, text, payload_checksum(text), now, now,
                                                                 trace))
        return bool(duplicates == 0)

    def _log_attempt(
        self, event_id: int, at: int, kind: str, holder: str | None, gen: int | None, detail: str | None = None
    ) -> None:
        self._conn.execute(LOG_ATTEMPT, (event_id, at, kind, holder, gen, detail))

    def _insert_events(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        """_insert_event for each (source, source_id, payload text), in order (PostgreSQL: in one statement)."""
        return self._backend.insert_events(encoded, now)

    def _log_attempts(self, entries: Sequence[AttemptEntry]) -> None:
        """Many history lines at once, in order (a backend where a statement is a round trip writes them in one)."""
        self._backend.log_attempts(entries)

    def _scalar(self, sql: str, params: Any = ()) -> Any:
        return one(self._conn, sql, params)
