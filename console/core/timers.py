"""Timers feed the inbox and never start a run. Interval, one-off and cron (with a time zone)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from console.core.base import RESERVED_SOURCES, StoreBase, dumps, loads
from console.core.intake import check_payload_shape
from console.core.models import Timer

CATCH_UP_POLICIES = ("coalesce", "each")
# Approval expiries are timers under this prefix; they belong to their approval, not to the user.
APPROVAL_EXPIRY_PREFIX = "expire:"
# A schedule's occurrences are fired by its timer under this prefix (console/core/schedules.py): steered as a schedule.
SCHEDULE_TIMER_PREFIX = "schedule:"


def _refuse_approval_expiry(timer_id: str) -> None:
    if isinstance(timer_id, str) and timer_id.startswith(APPROVAL_EXPIRY_PREFIX):
        raise ValueError(f"timer {timer_id!r} is the expiry of an approval; answer the approval (yes/no) instead")
    if isinstance(timer_id, str) and timer_id.startswith(SCHEDULE_TIMER_PREFIX):
        raise ValueError(f"timer {timer_id!r} fires a schedule; steer it with `agent-console schedules` instead")
# Past this many missed cron occurrences the count is not walked one by one any more.
_MAX_CRON_WALK = 100_000
# 9999-01-01 UTC: the latest due time whose date prints in every time zone (datetime stops at year 9999).
MAX_DUE = 253_370_764_800


def check_due(due: int) -> None:
    """ValueError unless due is a time a timer can have (and the CLI and console can print)."""
    if not 0 <= due <= MAX_DUE:
        raise ValueError(f"a timer's time must be between 1970-01-01 and 9999-01-01 UTC "
                         f"(epoch seconds 0 to {MAX_DUE}), not {due}")


def validate_zone(tz: str | None) -> None:
    """ValueError unless tz is an IANA zone name (or None, UTC)."""
    _zone(tz)


def _zone(tz: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {tz!r} (use an IANA name such as Europe/Berlin)") from exc


def validate_cron(expression: str, tz: str | None, *, now: int | None = None) -> None:
    """ValueError unless expression is a cron expression in a known zone; with `now`, also unless it
    fires at least once after now ('0 9 31 2 *' never does; a seventh field limits the years)."""
    from croniter import croniter  # with dateutil, about 8 ms of CPU: imported when a cron is first read

    _zone(tz)
    if not croniter.is_valid(expression):
        raise ValueError(f"invalid cron expression {expression!r}")
    if now is not None:
        cron_next(expression, tz, now)


def _is_repeat(moment: datetime, zone: ZoneInfo) -> bool:
    """True for the second pass through a wall-clock time repeated when clocks go back.

    Cron means wall-clock time, and a local 02:30 job must run once on the night the clocks go back,
    not twice; croniter yields both instants, so the later one is skipped.
    """
    first = moment.replace(tzinfo=None).replace(tzinfo=zone, fold=0)
    return int(first.timestamp()) != int(moment.timestamp())


def _fixed_hours(expression: str) -> bool:
    """A job at fixed hours ("30 2 * * *") runs once per wall-clock time; one whose hour field is a
    wildcard ("0 * * * *", "*/15 * * * *") is periodic and also runs in the repeated hour, as cron does."""
    fields = expression.split()
    return len(fields) < 2 or not fields[1].startswith("*")


def cron_occurrences(expression: str, tz: str | None, after: int) -> Iterator[int]:
    """Epoch seconds of the occurrences strictly after `after`, DST-aware; a fixed-hour job runs once
    per wall-clock time."""
    from croniter import CroniterBadCronError, CroniterBadDateError, croniter

    zone = _zone(tz)
    skip_repeats = _fixed_hours(expression)
    try:
        walker = croniter(expression, datetime.fromtimestamp(after, zone))
    except (CroniterBadCronError, ValueError) as exc:
        raise ValueError(f"invalid cron expression {expression!r}: {exc}") from exc
    while True:
        try:
            moment = walker.get_next(datetime)
        except CroniterBadDateError:  # no date matches any more (Feb 31, or a year field in the past)
            return
        if not (skip_repeats and _is_repeat(moment, zone)):
            yield int(moment.timestamp())


def cron_next(expression: str, tz: str | None, after: int) -> int:
    """The first occurrence after `after`; ValueError if there is none."""
    for moment in cron_occurrences(expression, tz, after):
        return moment
    when = datetime.fromtimestamp(after, _zone(tz)).isoformat(sep=" ", timespec="minutes")
    raise ValueError(f"cron expression {expression!r} never fires after {when}")


def _walk_cron(cron: str, tz: str | None, at: int, now: int) -> tuple[list[int], int | None]:
    """The occurrences from `at` (a due occurrence) up to now, and the first one after now (None when
    the expression fires no more: a year field that has run out)."""
    occurrences = [at]
    walker = cron_occurrences(cron, tz, at)
    upcoming = next(walker, None)
    while upcoming is not None and upcoming <= now and len(occurrences) < _MAX_CRON_WALK:
        occurrences.append(upcoming)
        upcoming = next(walker, None)
    if upcoming is not None and upcoming <= now:  # an outage longer than the walk: jump to the present
        occurrences.append(upcoming)
        upcoming = next(cron_occurrences(cron, tz, now), None)
    return occurrences, upcoming


_DUE_TIMERS = """SELECT id, due, every, cron, tz, payload, ev_source, ev_id, catch_up, each_cap, origin
                 FROM timers INDEXED BY timers_due WHERE done = 0 AND paused = 0 AND due <= ?"""


def _timer(row: tuple[Any, ...]) -> Timer:
    tid, due, every, cron, tz, payload, catch_up, paused, done, last, origin, ends_at = row
    return Timer(tid, due, every, cron, tz, loads(payload), catch_up, bool(paused), bool(done), last, loads(origin),
                 ends_at)


_TIMER_COLUMNS = "id, due, every, cron, tz, payload, catch_up, paused, done, last_fired_at, origin, ends_at"
# A timer with an end is done once its end has come or its next occurrence would be at or after it: nothing fires
# then, however late the scheduler runs (an outage across a schedule's expiry fires no coalesced occurrence).
_END_TIMERS = """UPDATE timers INDEXED BY timers_ends SET done = 1
                 WHERE ends_at IS NOT NULL AND done = 0 AND (ends_at <= ? OR due >= ends_at)"""
# Every column of a timer's row: what a delete hands back for its undo
_ROW_COLUMNS = ("id, due, every, cron, tz, payload, ev_source, ev_id, catch_up, each_cap, paused, done, created_at, "
                "last_fired_at, origin, ends_at")


@dataclass(frozen=True)
class RemovedTimer:
    """A deleted timer's whole row, as put_back_timer writes it again."""

    id: str
    row: tuple[Any, ...]


def _fired_body(payload: str, origin: str | None) -> dict[str, Any]:
    """A timer's event body: its payload, and the origin of the run that set it under `origin` (the run it
    wakes reads its trust from there). The stored origin replaces whatever the payload says under that name."""
    body = loads(payload)
    body = dict(body) if isinstance(body, dict) else {}
    if origin is not None:
        body["origin"] = loads(origin)
    return body


class TimersMixin(StoreBase):
    def add_timer(
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
    ) -> Timer:
        """Register (or re-register) a timer. A cron timer's first due time is its first
        occurrence at or after `due`. Re-registering the same occurrence cannot fire it twice:
        the event key timer_id@scheduled_at is refused the second time."""
        row = self._timer_values(timer_id, due, payload, every=every, cron=cron, tz=tz, catch_up=catch_up,
                                 key=key, each_cap=each_cap, now=now)
        with self.write_transaction():
            self._write_timer(row)
        timer = self.timer(timer_id)
        assert timer is not None
        return timer

    def check_timer(self, timer_id: str, due: int, payload: Mapping[str, Any] | None = None, **options: Any) -> None:
        """ValueError (saying what is wrong) unless add_timer would take these; writes nothing. A run
        checks its timers when it sets them, so a bad one fails the run there, not its finish."""
        self._timer_values(timer_id, due, payload, **options)

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
        """The timer's row, checked. reserved: the core writes a timer under a reserved prefix (a schedule's)."""
        if not isinstance(timer_id, str) or not timer_id.strip():
            raise ValueError("timer id must be a non-empty string")
        if not reserved:
            _refuse_approval_expiry(timer_id)
        if every is not None and cron is not None:
            raise ValueError("a timer is either an interval (every) or a cron timer, not both")
        if every is not None and (not isinstance(every, int) or not 0 < every <= MAX_DUE):
            raise ValueError(f"every must be a positive whole number of seconds, at most {MAX_DUE}")
        if key is not None and (every is not None or cron is not None):
            raise ValueError("a recurring timer can't use a fixed event key")
        if key is not None and key[0] in RESERVED_SOURCES:
            raise ValueError(f"source {key[0]!r} is reserved: a timer's fixed key cannot write it")
        if catch_up not in CATCH_UP_POLICIES:
            raise ValueError(f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, not {catch_up!r}")
        if each_cap < 1:
            raise ValueError("each_cap must be at least 1")
        if tz is not None and cron is None:
            raise ValueError("a time zone applies to cron timers only")
        first_due = int(due)
        check_due(first_due)
        if cron is not None:
            validate_cron(cron, tz)
            first_due = cron_next(cron, tz, first_due - 1)  # ValueError when it never fires after due
        body = dict(payload or {})
        check_payload_shape(body, "timer payload")
        text = dumps(body)
        created = int(now if now is not None else due)
        return (timer_id, first_due, every, cron, tz, text, *(key or (None, None)), catch_up, each_cap, created)

    def _write_timer(self, row: tuple[Any, ...], origin: Any = None, ends_at: int | None = None) -> None:
        """Write a timer; origin is the run that set it (None: the owner). Replacing a timer replaces its
        origin too: a timer an untrusted run re-set fires untrusted, whoever set it first. ends_at: no
        occurrence at or after it (a schedule's expiry)."""
        self._conn.execute(
            """INSERT INTO timers (id, due, every, cron, tz, payload, ev_source, ev_id, catch_up, each_cap, created_at,
                                   origin, ends_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (id) DO UPDATE SET due = excluded.due, every = excluded.every, cron = excluded.cron,
                  tz = excluded.tz, payload = excluded.payload, ev_source = excluded.ev_source,
                  ev_id = excluded.ev_id, catch_up = excluded.catch_up, each_cap = excluded.each_cap,
                  created_at = excluded.created_at, origin = excluded.origin, paused = 0, done = 0,
                  last_fired_at = NULL, ends_at = excluded.ends_at""",
            (*row, None if origin is None else dumps(origin), ends_at),
        )

    def timer(self, timer_id: str) -> Timer | None:
        for row in self._conn.execute(f"SELECT {_TIMER_COLUMNS} FROM timers WHERE id = ?", (timer_id,)):
            return _timer(row)
        return None

    def timers(self, *, include_done: bool = False) -> list[Timer]:
        """The owner's and the agent's timers; not the schedules' own (listed as schedules)."""
        clause = "" if include_done else "AND done = 0"
        return [_timer(r) for r in self._conn.execute(
            f"SELECT {_TIMER_COLUMNS} FROM timers WHERE substr(id, 1, {len(SCHEDULE_TIMER_PREFIX)}) <> ? {clause} "
            "ORDER BY due", (SCHEDULE_TIMER_PREFIX,))]

    def remove_timer(self, timer_id: str) -> bool:
        return self.take_timer(timer_id) is not None

    def take_timer(self, timer_id: str) -> RemovedTimer | None:
        """Delete a timer and hand back its whole row, so that put_back_timer can undo the delete exactly (its
        fixed key, catch-up cap, origin, last firing); None when there was no such timer."""
        _refuse_approval_expiry(timer_id)
        with self.write_transaction():
            for row in self._conn.execute(f"DELETE FROM timers WHERE id = ? RETURNING {_ROW_COLUMNS}", (timer_id,)):
                return RemovedTimer(str(row[0]), tuple(row))
            return None

    def put_back_timer(self, removed: RemovedTimer) -> bool:
        """A deleted timer back as it was (an undo). False, changing nothing, when a timer of that id was set
        since: the newer one stands. One that was due meanwhile fires at the scheduler's next pass (catch-up)."""
        marks = ", ".join("?" for _ in removed.row)
        with self.write_transaction():
            return bool(self._conn.execute(
                f"INSERT INTO timers ({_ROW_COLUMNS}) VALUES ({marks}) ON CONFLICT (id) DO NOTHING RETURNING id",
                removed.row).fetchall())

    def pause_timer(self, timer_id: str, paused: bool = True) -> bool:
        _refuse_approval_expiry(timer_id)
        with self.write_transaction():
            return bool(self._conn.execute(
                "UPDATE timers SET paused = ? WHERE id = ? RETURNING id", (int(paused), timer_id)
            ).fetchall())

    def fire_timer_now(self, timer_id: str, *, now: int) -> str:
        """One extra occurrence of a timer, now ("run now"): its event is keyed timer_id@now like any
        occurrence, and the schedule is left as it was (paused or not). Returns "fired", "duplicate" (an
        occurrence at this very second is already in the inbox) or "unknown" (no such timer)."""
        _refuse_approval_expiry(timer_id)
        with self.write_transaction():
            stored = self._conn.execute("SELECT payload, origin FROM timers WHERE id = ?", (timer_id,)).fetchall()
            if not stored:
                return "unknown"
            body = dict(_fired_body(*stored[0]), scheduled_for=now, late_by=0, skipped=0)
            if not self._insert_event("timer", f"{timer_id}@{now}", dumps(body), now):
                return "duplicate"
            self._conn.execute("UPDATE timers SET last_fired_at = ? WHERE id = ?", (now, timer_id))
            return "fired"

    def next_timer(self) -> Timer | None:
        for row in self._conn.execute(
            f"SELECT {_TIMER_COLUMNS} FROM timers INDEXED BY timers_due WHERE done = 0 AND paused = 0 "
            "ORDER BY due LIMIT 1"
        ):
            return _timer(row)
        return None

    def run_scheduler(self, *, now: int, trace: str | None = None) -> int:
        """Turn due timers into inbox events; returns how many timers were due. `trace`: the span context to
        keep with the events stored (telemetry.context_to_keep).

        The timer advances in the same transaction as the insert, so a second pass finds nothing
        due; the key timer_id@scheduled_at refuses a replay of the same occurrence.
        """
        # Walking a long outage of a frequent cron timer can take seconds: do it before taking the
        # write lock, so webhook ingests are not kept waiting; redone inside only if the timer changed.
        walks = {
            row[0]: ((row[1], row[3], row[4]), _walk_cron(row[3], row[4], row[1], now))
            for row in self._conn.execute(_DUE_TIMERS, (now,)).fetchall()
            if row[3]
        }
        with self.write_transaction():
            self._conn.execute(_END_TIMERS, (now,))
            due = self._conn.execute(_DUE_TIMERS, (now,)).fetchall()
            stored: list[tuple[str, str]] = []  # the events the due timers stored (a replayed key stores none)
            for timer_id, at, every, cron, tz, payload, ev_source, ev_id, catch_up, each_cap, origin in due:
                body = _fired_body(payload, origin)
                if every:
                    latest = at + ((now - at) // every) * every
                    missed_count = (latest - at) // every + 1
                    recent = range(max(at, latest - (each_cap - 1) * every), latest + 1, every)
                    self._emit(timer_id, body, list(recent), missed_count, now, catch_up, stored)
                    self._conn.execute(
                        "UPDATE timers SET due = ?, last_fired_at = ? WHERE id = ?", (latest + every, now, timer_id)
                    )
                elif cron:
                    planned_for, walk = walks.get(timer_id, (None, None))
                    if walk is None or planned_for != (at, cron, tz):
                        walk = _walk_cron(cron, tz, at, now)
                    occurrences, upcoming = walk
                    self._emit(timer_id, body, occurrences[-each_cap:], len(occurrences), now, catch_up, stored)
                    if upcoming is None:  # its last occurrence: done, like a one-off that fired
                        self._conn.execute("UPDATE timers SET done = 1, last_fired_at = ? WHERE id = ?",
                                           (now, timer_id))
                    else:
                        self._conn.execute(
                            "UPDATE timers SET due = ?, last_fired_at = ? WHERE id = ?", (upcoming, now, timer_id)
                        )
                else:
                    body.update(scheduled_for=at, late_by=now - at, skipped=0)
                    source, source_id = (ev_source, ev_id) if ev_source else ("timer", f"{timer_id}@{at}")
                    self._insert_timer_event(source, source_id, body, now, stored)
                    self._conn.execute("UPDATE timers SET done = 1, last_fired_at = ? WHERE id = ?", (now, timer_id))
            self._conn.execute(_END_TIMERS, (now,))
            for source, source_id in stored if trace is not None else []:
                self._conn.execute("UPDATE inbox SET trace = ? WHERE source = ? AND source_id = ?",
                                   (trace, source, source_id))
            return len(due)

    def _emit(
        self, timer_id: str, body: dict[str, Any], recent: list[int], missed_count: int, now: int, catch_up: str,
        stored: list[tuple[str, str]],
    ) -> None:
        """Insert the events for the occurrences that came due: `recent` are the latest (at most
        each_cap of them), out of missed_count in all."""
        if catch_up == "each":
            dropped = missed_count - len(recent)
            for index, at in enumerate(recent):
                event = dict(body, scheduled_for=at, late_by=now - at, skipped=dropped if index == 0 else 0)
                self._insert_timer_event("timer", f"{timer_id}@{at}", event, now, stored)
            return
        latest = recent[-1]
        event = dict(body, scheduled_for=latest, late_by=now - latest, skipped=missed_count - 1)
        self._insert_timer_event("timer", f"{timer_id}@{latest}", event, now, stored)

    def _insert_timer_event(self, source: str, source_id: str, body: dict[str, Any], now: int,
                            stored: list[tuple[str, str]]) -> None:
        if self._insert_event(source, source_id, dumps(body), now):
            stored.append((source, source_id))
        if source == "approval":
            self._settle_approval(source_id, now, "expiry")

    def _settle_approval(self, request_id: str, now: int, via: str) -> str | None:
        """Mirror the outcome that stands (the inbox row) onto the approval, for listing, with where it came
        from (`via`, recorded only by the write that settles it), and drop the approval's expiry timer:
        once an outcome stands there is nothing left for it to do, and left in place it was listed with
        the user's timers, counted as the next one due, and fired later into a refused duplicate.

        The approval's cards on the phone channels are told the outcome in the same transaction, so each
        channel replaces its card whoever answered (a phone, the console, the CLI, the expiry)."""
        stored = self._scalar(
            "SELECT payload FROM inbox WHERE source = 'approval' AND source_id = ?", (request_id,)
        )
        if stored is None:
            return None
        answer = str(loads(stored)["answer"])
        settled = self._conn.execute(
            """UPDATE approvals SET outcome = ?, resolved_at = ?, answered_via = ?
               WHERE request_id = ? AND outcome IS NULL RETURNING request_id""",
            (answer, now, via, request_id),
        ).fetchall()
        if settled:
            self._conn.execute(
                """UPDATE phone_messages SET wanted = ?, tries = 0, next_try_at = NULL, updated_at = ?
                   WHERE request_id = ? AND wanted = 'ask'""",
                (answer, now, request_id),
            )
            self._audit_answer(request_id, answer, via, now)
        # Only the approval's own timer: a timer of the user's under that name (a hand edit) is not ours.
        self._conn.execute(
            "DELETE FROM timers WHERE id = ? AND ev_source = 'approval' AND ev_id = ?",
            (f"{APPROVAL_EXPIRY_PREFIX}{request_id}", request_id),
        )
        return answer

    def drop_settled_expiry_timers(self) -> int:
        """Drop the expiry timers that versions before this one left behind for settled approvals.
        Returns how many went (the engine calls it at start; it is cheap when there are none)."""
        with self.write_transaction():
            return len(self._conn.execute(
                """DELETE FROM timers WHERE ev_source = 'approval' AND substr(id, 1, length(?)) = ?
                     AND ev_id IN (SELECT request_id FROM approvals WHERE outcome IS NOT NULL)
                   RETURNING id""",
                (APPROVAL_EXPIRY_PREFIX, APPROVAL_EXPIRY_PREFIX),
            ).fetchall())
