"""The agent's own schedules (issue 35): the record the owner approved, and the timer that fires it.

A schedule's occurrences are a timer's (`schedule:<id>`), so every occurrence is stored once, keyed
`schedule:<id>@<scheduled time>`, coalesced when missed, across crashes, takeovers, clock jumps and DST, exactly as
timers are; the timer's `ends_at` is the schedule's expiry, after which nothing fires. The schedule row keeps what
the timer does not: the title and instruction, the tools its runs may use, its budgets, only_if_changed and what
the last occurrence saw, its state, its origin (an untrusted run's schedule fires untrusted: the timer carries the
origin into each occurrence's event), and what the owner was told.

A run writes a schedule only through its fenced finish (ScheduleDraft, ScheduleUpdate); the owner steers it
(pause, resume, delete, renew) from the console, the command line or a phone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

from console.core.base import StoreBase, dumps, loads
from console.core.models import Schedule, ScheduleDraft, ScheduleSpec, ScheduleUpdate
from console.core.spend import NANOS_PER_USD, period
from console.core.timers import _END_TIMERS, _ROW_COLUMNS, SCHEDULE_TIMER_PREFIX, RemovedTimer, cron_occurrences

DAY = 86_400
RENEW_SECONDS = 30 * DAY  # a renewal runs the schedule 30 more days (from now, never shortening it)
EXPIRY_NOTICE = DAY  # the owner is told this long before a schedule expires
RECENT_RUNS = 10  # the runs an estimate of a run's cost averages

_COLUMNS = ("s.id, s.title, s.instruction, s.kind, s.at, s.every, s.cron, s.tz, s.tools, s.budget_occurrence_nanos, "
            "s.budget_month_nanos, s.only_if_changed, s.watch, s.expires_at, s.state, s.paused_reason, s.origin, "
            "s.request_id, s.created_at, s.updated_at, s.last_outcome, s.last_at, s.seen, s.expiry_told, "
            "s.budget_told, t.due, t.done")
_FROM = "FROM schedules s LEFT JOIN timers t ON t.id = ? || s.id"
# every column of a schedules row, as take_schedule hands it back and put_back_schedule writes it again
_SCHEDULE_ROW = ("id, title, instruction, kind, at, every, cron, tz, tools, budget_occurrence_nanos, "
                 "budget_month_nanos, only_if_changed, watch, seen, expires_at, state, paused_reason, origin, "
                 "request_id, created_at, updated_at, last_outcome, last_at, expiry_told, budget_told")


@dataclass(frozen=True)
class RemovedSchedule:
    """A deleted schedule's whole row and its timer's (None when it had none), as put_back_schedule writes them
    again: its origin, budgets, what it last saw and where its occurrences had got to."""

    id: str
    row: tuple[Any, ...]
    timer: RemovedTimer | None


def timer_id(schedule_id: str) -> str:
    return f"{SCHEDULE_TIMER_PREFIX}{schedule_id}"


def schedule_of_timer(source_id: str) -> str | None:
    """The schedule an occurrence's event belongs to (its source id `schedule:<id>@<time>`), or None."""
    if not source_id.startswith(SCHEDULE_TIMER_PREFIX) or "@" not in source_id:
        return None
    return source_id[len(SCHEDULE_TIMER_PREFIX):].rsplit("@", 1)[0]


def fires(spec: ScheduleSpec, after: int, count: int) -> list[int]:
    """The schedule's next `count` occurrences at or after `after`, before its expiry: exactly the times its
    timer fires (a cron's repeated wall-clock hour once, as timers do)."""
    return list(_fires(spec, after, count))


def _fires(spec: ScheduleSpec, after: int, count: int) -> Iterator[int]:
    if count <= 0:
        return
    ends = spec.expires_at
    if spec.kind == "once":
        moments: Iterator[int] = iter([spec.at] if spec.at is not None and spec.at >= after else [])
    elif spec.kind == "every":
        assert spec.at is not None and spec.every
        moments = _grid(spec.at, spec.every, after)
    else:
        assert spec.cron is not None
        moments = cron_occurrences(spec.cron, spec.tz, after - 1)
    for produced, moment in enumerate(moments, 1):
        if ends is not None and moment >= ends:
            return
        yield moment
        if produced >= count:
            return


def _grid(anchor: int, every: int, after: int) -> Iterator[int]:
    moment = anchor if after <= anchor else anchor + -(-(after - anchor) // every) * every
    while True:
        yield moment
        moment += every


def dst_change(moments: Sequence[int], zone: str) -> str | None:
    """'clocks change on Sun 29 Mar 2026 (UTC+01:00 → UTC+02:00)' when the owner's zone changes its offset
    between the first and the last of these moments, or None."""
    tz = ZoneInfo(zone)
    for before, after in pairwise(moments):
        old, new = datetime.fromtimestamp(before, tz), datetime.fromtimestamp(after, tz)
        if old.utcoffset() != new.utcoffset():
            day = _first_offset(before, after, tz)
            return (f"clocks change on {datetime.fromtimestamp(day, tz):%a %d %b %Y} "
                    f"({_offset(old)} → {_offset(new)})")
    return None


def _first_offset(start: int, end: int, tz: ZoneInfo) -> int:
    """The first second in (start, end] whose offset differs from start's (a binary search)."""
    offset = datetime.fromtimestamp(start, tz).utcoffset()
    low, high = start, end
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high


def _offset(moment: datetime) -> str:
    return f"UTC{moment:%z}"[:-2] + ":" + f"{moment:%z}"[-2:]


def span_words(seconds: int) -> str:
    """'1 day', '2 hours', '90 minutes': the largest unit that divides it."""
    for unit, size in (("day", DAY), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}" + ("s" if count != 1 else "")
    return f"{seconds} seconds"


def interval_words(spec: ScheduleSpec) -> str:
    """'once', 'every 2 hours', 'cron 0 9 * * 1-5 (Europe/Berlin)'."""
    if spec.kind == "once":
        return "once"
    if spec.kind == "every" and spec.every is not None:
        return f"every {span_words(spec.every)}"
    return f"cron {spec.cron} ({spec.tz})"


def origin_words(origin: Any) -> str:
    """'you' / 'your chat #3' / 'an untrusted github run #7': who asked for a schedule."""
    if not isinstance(origin, dict):
        return "you"
    where = f"{origin.get('source')} #{origin.get('event_id')}"
    return f"your {where}" if origin.get("trusted") is True else f"an untrusted {where} run"


def _spec(row: Sequence[Any]) -> ScheduleSpec:
    (sid, title, instruction, kind, at, every, cron, tz, tools, occ, month, changed, watch, expires) = row[:14]
    watched = loads(watch) if watch else {}
    watched = watched if isinstance(watched, dict) else {}
    listed = loads(tools) if tools else None
    return ScheduleSpec(sid, title, instruction, kind, at, every, cron, tz,
                        tuple(listed) if isinstance(listed, list) else None, occ, month, bool(changed),
                        tuple(watched.get("sources") or ()), watched.get("tool"), watched.get("arguments"), expires)


def _schedule(row: Sequence[Any]) -> Schedule:
    (state, reason, origin, request_id, created, updated, outcome, last_at, seen, expiry_told, budget_told, due,
     done) = row[14:]
    return Schedule(_spec(row), state, reason, loads(origin) if origin else None, request_id, created, updated,
                    outcome, last_at, loads(seen) if seen else None, bool(expiry_told), bool(budget_told),
                    None if due is None or done else int(due))


def _watch(spec: ScheduleSpec) -> str | None:
    if not spec.watch_sources and spec.watch_tool is None:
        return None
    return dumps({"sources": list(spec.watch_sources), "tool": spec.watch_tool,
                  "arguments": dict(spec.watch_arguments or {})})


class SchedulesMixin(StoreBase):
    # --- reading ------------------------------------------------------------------------------------
    def schedules(self) -> list[Schedule]:
        """Every schedule, the next to fire first (those that fire no more last)."""
        rows = self._conn.execute(f"SELECT {_COLUMNS} {_FROM} ORDER BY t.done, t.due, s.id",
                                  (SCHEDULE_TIMER_PREFIX,)).fetchall()
        return [_schedule(row) for row in rows]

    def schedule(self, schedule_id: str) -> Schedule | None:
        for row in self._conn.execute(f"SELECT {_COLUMNS} {_FROM} WHERE s.id = ?",
                                      (SCHEDULE_TIMER_PREFIX, schedule_id)):
            return _schedule(row)
        return None

    def schedule_rows(self, *, now: int, zone: str = "UTC") -> list[dict[str, Any]]:
        """Every schedule as `status --json` and `schedules --json` show it: {id, title, next, state, spend_month,
        expires} (spend_month in US dollars this month in `zone`, next and expires epoch seconds or null) and
        what the console lists besides: interval, the next fires, origin, last outcome, paused reason."""
        rows: list[dict[str, Any]] = []
        for schedule in self.schedules():
            spec = schedule.spec
            state = schedule.shown_state(now)
            upcoming = fires(spec, max(now, schedule.next_due or now), 3) if state == "active" else []
            rows.append({
                "id": spec.id, "title": spec.title, "next": upcoming[0] if upcoming else None, "state": state,
                "spend_month": self.schedule_month_spend(spec.id, now=now, zone=zone) / NANOS_PER_USD,
                "expires": spec.expires_at, "interval": interval_words(spec), "next_fires": upcoming,
                "instruction": spec.instruction, "tools": None if spec.tools is None else list(spec.tools),
                "trusted": schedule.trusted, "origin": origin_words(schedule.origin),
                "paused_reason": schedule.paused_reason if schedule.state == "paused" else None,
                "last_outcome": schedule.last_outcome, "last_at": schedule.last_at,
                "only_if_changed": spec.only_if_changed,
                "budget_per_occurrence_usd": _usd(spec.budget_occurrence_nanos),
                "budget_per_month_usd": _usd(spec.budget_month_nanos)})
        return rows

    def live_schedule_count(self, *, now: int, besides: str | None = None) -> int:
        """How many schedules count against max_schedules: those not expired and not done (besides one id, the
        schedule a change replaces)."""
        return sum(1 for s in self.schedules() if s.id != besides and s.shown_state(now) in ("active", "paused"))

    def schedule_spend(self, schedule_id: str, *, start: int = 0, end: int | None = None) -> int:
        """What the schedule's occurrences' runs cost in [start, end), nano-USD (reserved worst cases counted
        until settled; unpriced calls count nothing)."""
        low, high = f"{timer_id(schedule_id)}@", f"{timer_id(schedule_id)}A"  # '@' < 'A': every occurrence's key
        value = self._scalar(
            """SELECT SUM(CASE s.state WHEN 'settled' THEN s.cost_nanos ELSE s.reserved_nanos END)
               FROM spend s JOIN inbox i ON i.id = s.event_id
               WHERE i.source = 'timer' AND i.source_id >= ? AND i.source_id < ? AND s.at >= ? AND s.at < ?""",
            (low, high, start, end if end is not None else 2**62))
        return int(value or 0)

    def schedule_month_spend(self, schedule_id: str, *, now: int, zone: str) -> int:
        start, end = period("monthly", now, zone)
        return self.schedule_spend(schedule_id, start=start, end=end)

    def recent_run_cost(self, schedule_id: str | None = None, *, runs: int = RECENT_RUNS) -> int | None:
        """The average cost of the latest runs (of this schedule's occurrences, or of any event), nano-USD; None
        when no run has cost anything known yet."""
        if schedule_id is None:
            rows = self._conn.execute(
                """SELECT SUM(CASE state WHEN 'settled' THEN cost_nanos ELSE reserved_nanos END) FROM spend
                   WHERE event_id IS NOT NULL GROUP BY event_id ORDER BY MAX(at) DESC LIMIT ?""", (runs,)).fetchall()
        else:
            low, high = f"{timer_id(schedule_id)}@", f"{timer_id(schedule_id)}A"
            rows = self._conn.execute(
                """SELECT SUM(CASE s.state WHEN 'settled' THEN s.cost_nanos ELSE s.reserved_nanos END)
                   FROM spend s JOIN inbox i ON i.id = s.event_id
                   WHERE i.source = 'timer' AND i.source_id >= ? AND i.source_id < ?
                   GROUP BY s.event_id ORDER BY MAX(s.at) DESC LIMIT ?""", (low, high, runs)).fetchall()
        costs = [int(row[0]) for row in rows if row[0] is not None]
        return sum(costs) // len(costs) if costs else None

    def latest_event_id(self, sources: Sequence[str]) -> int:
        """The newest event from these sources (0: none): what only_if_changed compares against."""
        if not sources:
            return 0
        marks = ", ".join("?" for _ in sources)
        return int(self._scalar(f"SELECT MAX(id) FROM inbox WHERE source IN ({marks})", tuple(sources)) or 0)

    # --- a run's writes (inside its fenced finish) -------------------------------------------------------
    def _write_schedule(self, draft: ScheduleDraft, now: int) -> None:
        """Create or replace a schedule and its timer. A change replaces its origin too (an untrusted run's change
        makes the schedule fire untrusted) and starts it afresh: active, nothing told, what it saw read now."""
        spec = draft.spec
        seen = dumps({"event_id": self.latest_event_id(spec.watch_sources), "hash": None}) \
            if spec.only_if_changed else None
        self._conn.execute(
            """INSERT INTO schedules (id, title, instruction, kind, at, every, cron, tz, tools, budget_occurrence_nanos,
                   budget_month_nanos, only_if_changed, watch, seen, expires_at, state, paused_reason, origin,
                   request_id, created_at, updated_at, expiry_told, budget_told)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', NULL, ?, ?, ?, ?, 0, 0)
               ON CONFLICT (id) DO UPDATE SET title = excluded.title, instruction = excluded.instruction,
                   kind = excluded.kind, at = excluded.at, every = excluded.every, cron = excluded.cron,
                   tz = excluded.tz, tools = excluded.tools, budget_occurrence_nanos = excluded.budget_occurrence_nanos,
                   budget_month_nanos = excluded.budget_month_nanos, only_if_changed = excluded.only_if_changed,
                   watch = excluded.watch, seen = excluded.seen, expires_at = excluded.expires_at, state = 'active',
                   paused_reason = NULL, origin = excluded.origin, request_id = excluded.request_id,
                   updated_at = excluded.updated_at, expiry_told = 0, budget_told = 0""",
            (spec.id, spec.title, spec.instruction, spec.kind, spec.at, spec.every, spec.cron, spec.tz,
             None if spec.tools is None else dumps(list(spec.tools)), spec.budget_occurrence_nanos,
             spec.budget_month_nanos, int(spec.only_if_changed), _watch(spec), seen, spec.expires_at,
             None if draft.origin is None else dumps(draft.origin), draft.request_id, now, now))
        self._write_schedule_timer(spec, draft.origin, now)

    def _write_schedule_timer(self, spec: ScheduleSpec, origin: Any, now: int) -> None:
        """The timer that fires the schedule, from its first occurrence at or after now (none before: a late yes
        does not fire what it missed)."""
        if spec.kind == "once":
            due = spec.at if spec.at is not None else now  # a one-off approved late still fires, late
        else:
            upcoming = fires(spec, now, 1)
            due = upcoming[0] if upcoming else (spec.expires_at or now)  # none left: ended at once (_END_TIMERS)
        payload: dict[str, Any] = {"schedule": spec.id, "title": spec.title, "text": spec.instruction}
        if spec.tools is not None:
            payload["tools"] = list(spec.tools)  # the occurrence's run may use only these (and send_message)
        every = spec.every if spec.kind == "every" else None
        cron = spec.cron if spec.kind == "cron" else None
        row = self._timer_values(timer_id(spec.id), due, payload, every=every, cron=cron,
                                 tz=spec.tz if cron else None, now=now, reserved=True)
        self._write_timer(row, origin, ends_at=spec.expires_at)
        self._conn.execute(_END_TIMERS, (now,))

    def _update_schedule(self, update: ScheduleUpdate, now: int) -> None:
        """What an occurrence's run decided about its schedule (ScheduleUpdate), in its fenced finish."""
        self._conn.execute(
            """UPDATE schedules SET last_outcome = ?, last_at = ?, seen = COALESCE(?, seen),
                   budget_told = CASE WHEN ? = 1 THEN 1 ELSE budget_told END WHERE id = ?""",
            (update.outcome, update.occurrence, None if update.seen is None else dumps(update.seen),
             int(update.budget_told), update.schedule_id))
        if update.pause_reason is not None:
            self._pause_schedule(update.schedule_id, update.pause_reason, now)

    # --- the owner's steering ----------------------------------------------------------------------------
    def pause_schedule(self, schedule_id: str, *, now: int, reason: str = "paused by you") -> bool:
        with self.write_transaction():
            return self._pause_schedule(schedule_id, reason, now)

    def _pause_schedule(self, schedule_id: str, reason: str, now: int) -> bool:
        found = self._conn.execute(
            "UPDATE schedules SET state = 'paused', paused_reason = ?, updated_at = ? WHERE id = ? RETURNING id",
            (reason, now, schedule_id)).fetchall()
        self._conn.execute("UPDATE timers SET paused = 1 WHERE id = ?", (timer_id(schedule_id),))
        return bool(found)

    def resume_schedule(self, schedule_id: str, *, now: int) -> bool:
        """Active again from its next occurrence after now: what it missed while paused does not fire."""
        with self.write_transaction():
            stored = self.schedule(schedule_id)
            if stored is None:
                return False
            self._conn.execute(
                """UPDATE schedules SET state = 'active', paused_reason = NULL, budget_told = 0, updated_at = ?
                   WHERE id = ?""", (now, schedule_id))
            self._restart_timer(stored.spec, now)
            return True

    def renew_schedule(self, schedule_id: str, *, now: int, seconds: int = RENEW_SECONDS) -> int | None:
        """Run the schedule `seconds` more from now (never shortening it); an expired one fires again from its next
        occurrence after now. Returns the new expiry (None: no such schedule)."""
        with self.write_transaction():
            stored = self.schedule(schedule_id)
            if stored is None:
                return None
            expires = max(stored.spec.expires_at or 0, now + seconds)
            self._conn.execute(
                "UPDATE schedules SET expires_at = ?, expiry_told = 0, updated_at = ? WHERE id = ?",
                (expires, now, schedule_id))
            self._conn.execute("UPDATE timers SET ends_at = ? WHERE id = ?", (expires, timer_id(schedule_id)))
            self._restart_timer(ScheduleSpec(**{**_fields(stored.spec), "expires_at": expires}), now,
                                paused=stored.state == "paused")
            return expires

    def _restart_timer(self, spec: ScheduleSpec, now: int, *, paused: bool = False) -> None:
        """The schedule's timer, due at its next occurrence at or after now."""
        upcoming = fires(spec, now, 1)
        if upcoming:
            self._conn.execute("UPDATE timers SET due = ?, done = 0, paused = ? WHERE id = ?",
                               (upcoming[0], int(paused), timer_id(spec.id)))
        else:
            self._conn.execute("UPDATE timers SET done = 1, paused = ? WHERE id = ?", (int(paused), timer_id(spec.id)))

    def delete_schedule(self, schedule_id: str) -> bool:
        return self.take_schedule(schedule_id) is not None

    def take_schedule(self, schedule_id: str) -> RemovedSchedule | None:
        """Delete a schedule and its timer and hand both rows back, so that put_back_schedule can undo the delete
        exactly; None when there was no such schedule."""
        with self.write_transaction():
            timers = self._conn.execute(f"DELETE FROM timers WHERE id = ? RETURNING {_ROW_COLUMNS}",
                                        (timer_id(schedule_id),)).fetchall()
            rows = self._conn.execute(f"DELETE FROM schedules WHERE id = ? RETURNING {_SCHEDULE_ROW}",
                                      (schedule_id,)).fetchall()
            if not rows:
                return None
            timer = RemovedTimer(str(timers[0][0]), tuple(timers[0])) if timers else None
            return RemovedSchedule(str(rows[0][0]), tuple(rows[0]), timer)

    def put_back_schedule(self, removed: RemovedSchedule) -> bool:
        """A deleted schedule back as it was, with its timer (an undo). False, changing nothing, when a schedule of
        that id was made since: the newer one stands. An occurrence due meanwhile fires at the scheduler's next
        pass, coalesced, as after any pause of the scheduler."""
        marks = ", ".join("?" for _ in removed.row)
        with self.write_transaction():
            back = self._conn.execute(
                f"INSERT INTO schedules ({_SCHEDULE_ROW}) VALUES ({marks}) ON CONFLICT (id) DO NOTHING RETURNING id",
                removed.row).fetchall()
            if not back:
                return False
            if removed.timer is not None:
                timer_marks = ", ".join("?" for _ in removed.timer.row)
                self._conn.execute(f"INSERT INTO timers ({_ROW_COLUMNS}) VALUES ({timer_marks}) "
                                   "ON CONFLICT (id) DO NOTHING", removed.timer.row)
            return True

    # --- telling the owner before a schedule expires -------------------------------------------------------
    def next_expiry_notice(self) -> int | None:
        """When the next 'expires tomorrow' notice is due (None: none is owed)."""
        value = self._scalar(
            """SELECT MIN(expires_at) FROM schedules INDEXED BY schedules_expiry
               WHERE expiry_told = 0 AND expires_at IS NOT NULL AND state = 'active'""")
        return None if value is None else int(value) - EXPIRY_NOTICE

    def tell_expiring_schedules(self, *, now: int, zone: str = "UTC") -> int:
        """Queue one message per active schedule that expires within a day (and has not expired), once each;
        returns how many were told."""
        with self.write_transaction():
            rows = self._conn.execute(
                """SELECT id, title, expires_at FROM schedules INDEXED BY schedules_expiry
                   WHERE expiry_told = 0 AND expires_at IS NOT NULL AND state = 'active' AND expires_at <= ?""",
                (now + EXPIRY_NOTICE,)).fetchall()
            told = 0
            for schedule_id, title, expires_at in rows:
                self._conn.execute("UPDATE schedules SET expiry_told = 1 WHERE id = ?", (schedule_id,))
                if expires_at <= now:
                    continue  # expired before anyone could say so (the engine was down): shown as expired
                when = datetime.fromtimestamp(expires_at, ZoneInfo(zone)).isoformat(sep=" ", timespec="minutes")
                self._write_outbox(
                    f"Schedule {schedule_id} ({title!r}) expires at {when}: after that it fires no more. "
                    f"To keep it: agent-console schedules renew {schedule_id} (or renew it in the console or with "
                    f"/schedules).", urgent=False, now=now, event_id=None, approval_id=None)
                told += 1
            return told


def _fields(spec: ScheduleSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in ScheduleSpec.__dataclass_fields__}


def _usd(nanos: int | None) -> float | None:
    return None if nanos is None else nanos / NANOS_PER_USD
