"""The `schedule` tool's side of the agent (issue 35): reading a request into the schedule the owner approves, the
preview the owner sees before saying yes, and the gate an occurrence passes before any model request.

What is approved is exactly what is created: the model's arguments are read once into their complete form (its
id, the anchor of an interval, the expiry, the zone all spelled out), the approval is bound to that form, and the
yes creates the schedule from it, so the fire times on the card are the times it fires. An occurrence's run first
asks the gate: a paused schedule or one whose budget the run would pass makes no model request (it pauses and the
owner is told once), and an `only_if_changed` one runs the model only when something changed since it last ran.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

from console.agents.base import RunContext
from console.agents.tools import ToolInputError, canonical, iso_moment, text_argument
from console.core import Event, ScheduleSpec, ScheduleUpdate, Store
from console.core.schedules import dst_change, fires, interval_words, schedule_of_timer, span_words
from console.core.spend import NANOS_PER_USD, check_budget_usd, usd_to_nanos
from console.core.timers import MAX_DUE, validate_cron, validate_zone

DAY = 86_400
DEFAULT_EXPIRY = 30 * DAY  # a recurring schedule's expiry unless the request says otherwise
PREVIEW_FIRES = 5
MONTH = 30 * DAY  # the month an estimate of the cost counts fires over
INTERVAL_SAMPLE = 50  # a cron's next occurrences checked against min_schedule_interval
CRON_MONTH_WALK = 3_000  # a month of fires 15 minutes apart (min_schedule_interval's default) is 2,880
RECURRING_RULE = "schedule: a recurring schedule always asks"
# Built-ins an occurrence with its own tools list may still use: telling the owner what it found.
ALWAYS_OFFERED = ("send_message",)
_UNITS = {"minute": 60, "minutes": 60, "min": 60, "mins": 60, "m": 60,
          "hour": 3600, "hours": 3600, "h": 3600, "day": DAY, "days": DAY, "d": DAY}
_SPAN = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")


def _span(text: str, what: str) -> int:
    """'15 minutes', '2 hours', '1 day' (or 15m, 2h, 1d) in seconds."""
    found = _SPAN.match(text.lower())
    if found is None or found.group(2) not in _UNITS:
        raise ToolInputError(f"{what} must be a number of minutes, hours or days ('30 minutes', '2 hours', "
                             f"'1 day'), not {text!r}")
    seconds = int(found.group(1)) * _UNITS[found.group(2)]
    if not 0 < seconds <= MAX_DUE:
        raise ToolInputError(f"{what} must be more than 0")
    return seconds


def _iso(moment: int, zone: str) -> str:
    return datetime.fromtimestamp(moment, ZoneInfo(zone)).isoformat()


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    """A list of names (or one text of them separated by commas)."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item.strip() for item in items):
        raise ToolInputError(f"`{what}` must be a list of names")
    return tuple(dict.fromkeys(item.strip() for item in items))


def _flag(value: Any, what: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ToolInputError(f"`{what}` must be true or false")


def _budget(value: Any) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    if not isinstance(value, Mapping) or set(value) - {"per_occurrence_usd", "per_month_usd"}:
        raise ToolInputError("`budget` must be an object with per_occurrence_usd and/or per_month_usd (US dollars)")
    found: list[int | None] = []
    for name in ("per_occurrence_usd", "per_month_usd"):
        usd = value.get(name)
        try:
            found.append(None if usd is None or usd == 0 else usd_to_nanos(check_budget_usd(usd, f"budget.{name}")))
        except ValueError as exc:
            raise ToolInputError(str(exc)) from None
    return found[0], found[1]


def read_schedule(arguments: Mapping[str, Any], *, anchor: Event, zone: str, min_interval: int) -> ScheduleSpec:
    """The schedule a `schedule` call asks for (ToolInputError says what is wrong). Defaults are read from the
    asking event, never the clock, so a retried run asks for the same schedule: the id from the event and the
    arguments, an interval's first occurrence one interval after the event, the expiry 30 days after it."""
    title = text_argument(arguments, "title") or ""
    instruction = text_argument(arguments, "instruction") or ""
    given = [name for name in ("at", "every", "cron") if arguments.get(name) is not None]
    if len(given) != 1:
        raise ToolInputError("give exactly one of `at` (once), `every` ('30 minutes', '2 hours', '1 day') or "
                             "`cron` (with `tz`)")
    kind = {"at": "once", "every": "every", "cron": "cron"}[given[0]]
    schedule_id = text_argument(arguments, "schedule_id", required=False) or \
        f"s{anchor.id}-{hashlib.sha256(canonical(dict(arguments)).encode()).hexdigest()[:6]}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", schedule_id):
        raise ToolInputError("`schedule_id` is letters, digits, '.', '_' and '-' (at most 64)")
    at = every = None
    cron = tz = None
    if kind == "once":
        at = iso_moment(text_argument(arguments, "at") or "", "at")
    elif kind == "every":
        every = _span(str(arguments["every"]), "`every`")
        start = text_argument(arguments, "start", required=False)
        at = iso_moment(start, "start") if start else anchor.created_at + every
        if every < min_interval:
            raise ToolInputError(f"refused: every {span_words(every)} is more often than min_schedule_interval "
                                 f"({span_words(min_interval)}) allows; ask for a longer interval")
    else:
        cron = text_argument(arguments, "cron") or ""
        tz = text_argument(arguments, "tz", required=False) or zone
        try:
            validate_zone(tz)
            validate_cron(cron, tz, now=anchor.created_at)
        except ValueError as exc:
            raise ToolInputError(str(exc)) from None
    expiry = arguments.get("expiry")
    if expiry is None:
        expires_at = None if kind == "once" else anchor.created_at + DEFAULT_EXPIRY
    elif not isinstance(expiry, str):
        raise ToolInputError("`expiry` is an ISO 8601 time or a span ('14 days')")
    elif _SPAN.match(expiry.lower()):
        expires_at = anchor.created_at + _span(expiry, "`expiry`")
    else:
        expires_at = iso_moment(expiry, "expiry")
    occurrence, month = _budget(arguments.get("budget"))
    watch_tool = text_argument(arguments, "watch_tool", required=False)
    watch_arguments = arguments.get("watch_arguments")
    if watch_arguments is not None and not isinstance(watch_arguments, Mapping):
        raise ToolInputError("`watch_arguments` must be an object")
    spec = ScheduleSpec(schedule_id, title, instruction, kind, at, every, cron, tz,
                        _names(arguments.get("tools"), "tools"), occurrence, month,
                        _flag(arguments.get("only_if_changed"), "only_if_changed"),
                        _names(arguments.get("watch_sources"), "watch_sources") or (), watch_tool,
                        dict(watch_arguments) if watch_arguments is not None else None, expires_at)
    if spec.only_if_changed and not spec.watch_sources and spec.watch_tool is None:
        raise ToolInputError("only_if_changed needs what to watch: `watch_sources` (event sources) and/or "
                             "`watch_tool` (a read-only tool whose result is compared)")
    if spec.kind == "cron":
        moments = fires(spec, anchor.created_at, INTERVAL_SAMPLE)
        gaps = [later - earlier for earlier, later in pairwise(moments)]
        if gaps and min(gaps) < min_interval:
            raise ToolInputError(f"refused: cron {cron!r} fires {span_words(min(gaps))} apart, more often than "
                                 f"min_schedule_interval ({span_words(min_interval)}) allows")
    if expires_at is not None and not fires(spec, anchor.created_at, 1):
        raise ToolInputError("the schedule never fires before its expiry")
    return spec


def arguments_of(spec: ScheduleSpec, zone: str) -> dict[str, Any]:
    """The request in its complete form, which the approval is bound to and the yes creates (read_schedule of it
    is the same schedule)."""
    arguments: dict[str, Any] = {"schedule_id": spec.id, "title": spec.title, "instruction": spec.instruction}
    if spec.kind == "once" and spec.at is not None:
        arguments["at"] = _iso(spec.at, zone)
    elif spec.kind == "every" and spec.every is not None and spec.at is not None:
        arguments.update(every=span_words(spec.every), start=_iso(spec.at, zone))
    else:
        arguments.update(cron=spec.cron, tz=spec.tz)
    if spec.expires_at is not None:
        arguments["expiry"] = _iso(spec.expires_at, zone)
    if spec.tools is not None:
        arguments["tools"] = list(spec.tools)
    if spec.budget_occurrence_nanos is not None or spec.budget_month_nanos is not None:
        arguments["budget"] = {name: nanos / NANOS_PER_USD for name, nanos in (
            ("per_occurrence_usd", spec.budget_occurrence_nanos), ("per_month_usd", spec.budget_month_nanos))
            if nanos is not None}
    if spec.only_if_changed:
        arguments["only_if_changed"] = True
    if spec.watch_sources:
        arguments["watch_sources"] = list(spec.watch_sources)
    if spec.watch_tool is not None:
        arguments["watch_tool"] = spec.watch_tool
    if spec.watch_arguments is not None:
        arguments["watch_arguments"] = dict(spec.watch_arguments)
    return arguments


def fire_words(moment: int, zone: str) -> str:
    """'Tue 2026-12-08 09:00:00 CET': a fire time in the owner's zone, to the second."""
    return datetime.fromtimestamp(moment, ZoneInfo(zone)).strftime("%a %Y-%m-%d %H:%M:%S %Z")


def usd_words(nanos: int | None) -> str:
    """'$0.42'; an amount under a cent with its digits ('$0.000001'), never a misleading '$0.00'."""
    if nanos is None:
        return "unknown (no run has cost anything yet)"
    usd = nanos / NANOS_PER_USD
    return f"${usd:.2f}" if usd == 0 or usd >= 0.01 else f"${usd:.9f}".rstrip("0")


def estimated_month(spec: ScheduleSpec, store: Store, *, now: int) -> tuple[int | None, int]:
    """(the estimated cost of a month of this schedule, nano-USD, or None when no run's cost is known yet; the
    fires it counts): the recent runs' average cost (this schedule's own, else any run's) times its fires in the
    next 30 days."""
    most = MONTH // spec.every + 1 if spec.kind == "every" and spec.every else CRON_MONTH_WALK
    count = sum(1 for moment in fires(spec, now, most) if moment < now + MONTH)
    average = store.recent_run_cost(spec.id)
    if average is None:
        average = store.recent_run_cost()
    return (None if average is None else average * count), count


def preview(spec: ScheduleSpec, store: Store, *, now: int, zone: str) -> dict[str, Any]:
    """What the approval shows before the yes (kept in its details, shown on every surface): the next fire times
    in the owner's zone (to the second; a DST change among them named), the interval, the expiry, the
    instruction, the tools and the estimated monthly cost."""
    moments = fires(spec, now, PREVIEW_FIRES)
    cost, count = estimated_month(spec, store, now=now)
    shown: dict[str, Any] = {
        "schedule": spec.id, "title": spec.title, "interval": interval_words(spec),
        "next_fires": [fire_words(moment, zone) for moment in moments], "fire_times": moments,
        "expires": "never (it fires once)" if spec.expires_at is None else fire_words(spec.expires_at, zone),
        "instruction": spec.instruction,
        "tools": "as your policy allows" if spec.tools is None else ", ".join(spec.tools) or "none",
        "estimated_monthly_cost": f"{usd_words(cost)} ({count} fires in 30 days"
                                  + (")" if cost is None else " × the recent runs' average)"),
    }
    change = dst_change(moments, zone)
    if change is not None:
        shown["dst_change"] = change
    if spec.budget_occurrence_nanos is not None or spec.budget_month_nanos is not None:
        shown["budget"] = ", ".join(part for part in (
            None if spec.budget_occurrence_nanos is None else f"{usd_words(spec.budget_occurrence_nanos)} per "
                                                               "occurrence",
            None if spec.budget_month_nanos is None else f"{usd_words(spec.budget_month_nanos)} per month") if part)
    if spec.only_if_changed:
        watched = [*(f"new events from {source}" for source in spec.watch_sources),
                   *([f"a different result of {spec.watch_tool}"] if spec.watch_tool else [])]
        shown["only_if_changed"] = "runs only on " + " or ".join(watched)
    return shown


def occurrence_tools(events: Sequence[Event]) -> tuple[str, ...] | None:
    """The tools a conversation about these events may use: a schedule's occurrence with a tools list narrows
    the policy to it (and ALWAYS_OFFERED); None when nothing narrows it."""
    narrowed: set[str] | None = None
    for event in events:
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        if event.source == "timer" and isinstance(payload.get("tools"), list):
            listed = {str(name) for name in payload["tools"]} | set(ALWAYS_OFFERED)
            narrowed = listed if narrowed is None else narrowed & listed
    return None if narrowed is None else tuple(sorted(narrowed))


def is_occurrence(event: Event) -> bool:
    return event.source == "timer" and schedule_of_timer(event.source_id) is not None


def result_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()




Peek = Callable[[str, Mapping[str, Any]], str]  # a read-only tool's result (ToolInputError when it cannot be had)


def gate_occurrence(ctx: RunContext, event: Event, peek: Peek, *, zone: str) -> bool:
    """Whether a schedule's occurrence runs the model (True), decided before any model request and staged for the
    run's finish. Not when its schedule is gone or paused; not when the run would pass a budget (the schedule
    pauses and the owner is told once); with only_if_changed, not when nothing it watches changed since it last
    ran (recorded `skipped`, $0)."""
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    schedule_id = schedule_of_timer(event.source_id) or ""
    occurrence = int(payload.get("scheduled_for") or ctx.now)
    stored = ctx.store.schedule(schedule_id)
    if stored is None:
        ctx.note("not run: its schedule was deleted", [event.id])
        return False
    spec = stored.spec
    if stored.state == "paused":
        ctx.note(f"not run: schedule {spec.id} is paused ({stored.paused_reason})", [event.id])
        ctx.update_schedule(ScheduleUpdate(spec.id, occurrence, "not run (paused)"))
        return False
    over = _over_budget(ctx.store, spec, now=ctx.now, zone=zone)
    if over is not None:
        ctx.note(f"not run: {over}; schedule {spec.id} is paused", [event.id])
        told = stored.budget_told or any(u.schedule_id == spec.id and u.budget_told for u in ctx.schedule_updates)
        if not told:
            ctx.say(f"Schedule {spec.id} ({spec.title!r}) is paused: {over}. Resume it (agent-console schedules "
                    f"resume {spec.id}) or change its budget.", urgent=True)
        ctx.update_schedule(ScheduleUpdate(spec.id, occurrence, "paused (budget)", pause_reason=f"budget: {over}",
                                           budget_told=True))
        return False
    if not spec.only_if_changed:
        ctx.update_schedule(ScheduleUpdate(spec.id, occurrence, "ran"))
        return True
    seen = stored.seen if isinstance(stored.seen, Mapping) else {}
    latest = ctx.store.latest_event_id(spec.watch_sources)
    news = spec.watch_sources and latest > int(seen.get("event_id") or 0)
    digest = seen.get("hash")
    if spec.watch_tool is not None:
        try:
            fresh = result_hash(peek(spec.watch_tool, spec.watch_arguments or {}))
        except ToolInputError as exc:  # cannot tell whether it changed: run, and say why
            ctx.note(f"only_if_changed could not check: {exc}", [event.id])
            fresh = None
        news = news or fresh is None or (digest is not None and fresh != digest)
        digest = fresh if fresh is not None else digest
    seen_now = {"event_id": latest, "hash": digest}
    if not news:
        ctx.note("skipped: nothing it watches changed since its last occurrence (no model request, $0)", [event.id])
        ctx.update_schedule(ScheduleUpdate(spec.id, occurrence, "skipped", seen=seen_now))
        return False
    ctx.update_schedule(ScheduleUpdate(spec.id, occurrence, "ran", seen=seen_now))
    return True


def _over_budget(store: Store, spec: ScheduleSpec, *, now: int, zone: str) -> str | None:
    """Why the next run would pass the schedule's budget (its estimated cost: the average of its recent runs, or of
    any run before it has one), or None."""
    if spec.budget_occurrence_nanos is None and spec.budget_month_nanos is None:
        return None
    estimate = store.recent_run_cost(spec.id)
    if estimate is None:
        estimate = store.recent_run_cost() or 0
    if spec.budget_occurrence_nanos is not None and estimate > spec.budget_occurrence_nanos:
        return (f"a run costs about {usd_words(estimate)}, more than its budget of "
                f"{usd_words(spec.budget_occurrence_nanos)} per occurrence")
    if spec.budget_month_nanos is not None:
        spent = store.schedule_month_spend(spec.id, now=now, zone=zone)
        if spent + estimate > spec.budget_month_nanos:
            return (f"{usd_words(spent)} spent this month and a run costs about {usd_words(estimate)}, past its "
                    f"budget of {usd_words(spec.budget_month_nanos)} per month")
    return None
