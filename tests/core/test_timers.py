"""Timers feed the inbox: interval, one-off and cron (with a time zone), catch-up policies, pause, remove."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

import console.core.timers as timers_module
from console.core import Store
from console.core.timers import validate_cron
from tests.core.backends import wait_for_locks_at_most

T = 1_000_000
HOUR = 3_600
DAY = 86_400
BERLIN = ZoneInfo("Europe/Berlin")


def timer_events(store: Store, timer_id: str) -> list[dict[str, object]]:
    """Payloads of one timer's events, oldest first."""
    return [e.payload for e in reversed(store.events(source="timer", limit=10_000))
            if e.source_id.startswith(f"{timer_id}@")]


def local(moment: int) -> datetime:
    return datetime.fromtimestamp(moment, BERLIN)


def epoch(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp())


def test_an_interval_timer_fires_each_period_once(store: Store) -> None:
    store.add_timer("poll", T, {"task": "poll feeds"}, every=60)
    assert store.run_scheduler(now=T - 1) == 0
    assert store.run_scheduler(now=T) == 1
    assert store.run_scheduler(now=T + 59) == 0
    assert store.run_scheduler(now=T + 60) == 1
    assert store.run_scheduler(now=T + 60) == 0
    events = store.events(source="timer")
    assert [e.source_id for e in reversed(events)] == [f"poll@{T}", f"poll@{T + 60}"]
    assert events[0].payload == {"task": "poll feeds", "scheduled_for": T + 60, "late_by": 0, "skipped": 0}
    timer = store.timer("poll")
    assert timer is not None and (timer.due, timer.last_fired_at) == (T + 120, T + 60)


def test_a_late_interval_timer_keeps_its_phase(store: Store) -> None:
    store.add_timer("poll", T, {}, every=60)
    store.run_scheduler(now=T + 150)  # occurrences T, T+60, T+120 missed: one coalesced event
    [payload] = timer_events(store, "poll")
    assert payload == {"scheduled_for": T + 120, "late_by": 30, "skipped": 2}
    timer = store.timer("poll")
    assert timer is not None and timer.due == T + 180  # not now + 60: the period stays on its grid


def test_a_one_off_timer_fires_once_under_its_own_key(store: Store) -> None:
    store.add_timer("follow-up", T + 300, {"task": "check the deploy"}, key=("followup", "deploy-42"))
    assert store.run_scheduler(now=T + 299) == 0
    assert store.run_scheduler(now=T + 400) == 1
    assert store.run_scheduler(now=T + 10 * DAY) == 0
    event = store.find_event("followup", "deploy-42")
    assert event is not None
    assert event.payload == {"task": "check the deploy", "scheduled_for": T + 300, "late_by": 100, "skipped": 0}
    timer = store.timer("follow-up")
    assert timer is not None and timer.done
    assert store.timers() == [] and [t.id for t in store.timers(include_done=True)] == ["follow-up"]
    assert store.next_timer() is None


def test_the_events_a_firing_stores_keep_its_trace_context_and_others_are_left_alone(store: Store) -> None:
    fired_span = "link 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    store.add_timer("poll", T, {"task": "poll"}, every=60)
    store.add_timer("once", T, {"task": "once"}, key=("followup", "deploy-7"))
    store.ingest("home", "d-1", {}, now=T)
    assert store.run_scheduler(now=T + 1, trace=fired_span) == 2
    assert store.run_scheduler(now=T + 61) == 1  # a firing told no context keeps none
    kept = {(e.source, e.source_id): e.trace for e in store.events(limit=100)}
    assert kept == {("timer", f"poll@{T}"): fired_span, ("followup", "deploy-7"): fired_span,
                    ("timer", f"poll@{T + 60}"): None, ("home", "d-1"): None}


def test_a_cron_timer_runs_on_local_wall_clock_time(store: Store) -> None:
    start = epoch(2026, 6, 1, 12)
    timer = store.add_timer("digest", start, {"task": "digest"}, cron="0 9 * * *", tz="Europe/Berlin")
    assert local(timer.due) == datetime(2026, 6, 2, 9, 0, tzinfo=BERLIN)  # first occurrence after `due`
    assert store.run_scheduler(now=timer.due - 1) == 0
    assert store.run_scheduler(now=timer.due) == 1
    after = store.timer("digest")
    assert after is not None and local(after.due) == datetime(2026, 6, 3, 9, 0, tzinfo=BERLIN)
    utc = store.add_timer("utc-digest", start, {}, cron="0 9 * * *")
    assert datetime.fromtimestamp(utc.due, ZoneInfo("UTC")).hour == 9  # no tz: UTC


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 2 * * *", "59 1 * * *", "0 3 * * *", "0 9 * * *"])
@pytest.mark.parametrize(("first", "last"), [(date(2026, 3, 26), date(2026, 4, 1)),
                                             (date(2026, 10, 22), date(2026, 10, 28))])
def test_a_daily_local_cron_fires_once_per_local_date_across_dst(
    store: Store, expression: str, first: date, last: date
) -> None:
    """2026-03-29 has no 02:00-03:00 in Berlin; 2026-10-25 has it twice. Either way: one event a day."""
    start = epoch(first.year, first.month, first.day)
    end = epoch(last.year, last.month, last.day)
    store.add_timer("nightly", start, {"task": "backup"}, cron=expression, tz="Europe/Berlin")
    now = start
    while now < end:  # a scheduler that wakes every 20 minutes, and when the next timer is due
        store.run_scheduler(now=now)
        timer = store.timer("nightly")
        assert timer is not None and timer.due > now
        now = min(now + 20 * 60, timer.due)
    fired = [local(int(str(p["scheduled_for"]))) for p in timer_events(store, "nightly")]
    per_date = Counter(moment.date() for moment in fired)
    expected = [first + timedelta(days=n) for n in range((last - first).days)]
    assert sorted(per_date) == expected
    assert set(per_date.values()) == {1}
    hour, minute = int(expression.split()[1]), int(expression.split()[0])
    for moment in fired:
        if moment.date() != date(2026, 3, 29) or hour != 2:
            assert (moment.hour, moment.minute) == (hour, minute)
        else:  # the local time did not exist that night: it runs at the first moment after the gap
            assert (moment.hour, moment.minute) == (3, 0)
    assert {p["late_by"] for p in timer_events(store, "nightly")} == {0}


def test_catch_up_each_emits_one_event_per_missed_occurrence_up_to_the_cap(store: Store) -> None:
    store.add_timer("reconcile", T, {"task": "reconcile"}, every=HOUR, catch_up="each", each_cap=3)
    store.run_scheduler(now=T + 10 * HOUR + 5)  # eleven occurrences came due during the outage
    payloads = timer_events(store, "reconcile")
    assert [p["scheduled_for"] for p in payloads] == [T + 8 * HOUR, T + 9 * HOUR, T + 10 * HOUR]
    assert [p["skipped"] for p in payloads] == [8, 0, 0]  # the first says how many were dropped
    assert [p["late_by"] for p in payloads] == [2 * HOUR + 5, HOUR + 5, 5]
    store.run_scheduler(now=T + 11 * HOUR)
    assert len(timer_events(store, "reconcile")) == 4


def test_catch_up_each_for_cron_and_coalesce_for_cron(store: Store) -> None:
    start = epoch(2026, 5, 4)  # a Monday
    store.add_timer("daily-each", start, {}, cron="0 6 * * *", tz="Europe/Berlin", catch_up="each", each_cap=10)
    store.add_timer("daily-one", start, {}, cron="0 6 * * *", tz="Europe/Berlin")
    assert store.run_scheduler(now=epoch(2026, 5, 8, 7)) == 2  # Monday..Friday at 06:00 missed
    each = timer_events(store, "daily-each")
    assert [local(int(str(p["scheduled_for"]))).day for p in each] == [4, 5, 6, 7, 8]
    assert [p["skipped"] for p in each] == [0, 0, 0, 0, 0]
    [one] = timer_events(store, "daily-one")
    assert local(int(str(one["scheduled_for"]))).day == 8 and one["skipped"] == 4 and one["late_by"] == HOUR


def test_a_paused_timer_does_not_fire_until_resumed(store: Store) -> None:
    store.add_timer("poll", T, {}, every=60)
    assert store.pause_timer("poll") is True
    assert store.run_scheduler(now=T + 600) == 0
    assert store.next_timer() is None
    timer = store.timer("poll")
    assert timer is not None and timer.paused
    assert store.pause_timer("poll", paused=False) is True
    assert store.run_scheduler(now=T + 600) == 1
    [payload] = timer_events(store, "poll")
    assert payload["skipped"] == 10  # what it missed while paused comes as one event
    assert store.pause_timer("no-such-timer") is False


def test_a_removed_timer_never_fires(store: Store) -> None:
    store.add_timer("poll", T, {}, every=60)
    store.add_timer("other", T + 30, {}, every=60)
    assert store.remove_timer("poll") is True
    assert store.remove_timer("poll") is False
    assert store.timer("poll") is None
    assert store.run_scheduler(now=T + 600) == 1
    assert timer_events(store, "poll") == []
    nxt = store.next_timer()
    assert nxt is not None and nxt.id == "other"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every": 60, "cron": "* * * * *"}, "not both"),
        ({"every": 0}, "positive"),
        ({"every": -5}, "positive"),
        ({"every": 10**20}, "at most"),
        ({"cron": "every day at nine"}, "invalid cron"),
        ({"cron": "61 * * * *"}, "invalid cron"),
        ({"cron": "0 9 31 2 *"}, r"cron expression '0 9 31 2 \*' never fires"),
        ({"cron": "0 9 31 4,6,9,11 *", "tz": "Europe/Berlin"}, "never fires"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"tz": "Europe/Berlin"}, "cron timers only"),
        ({"every": 60, "key": ("followup", "x")}, "fixed event key"),
        ({"catch_up": "all"}, "catch_up"),
        ({"each_cap": 0}, "each_cap"),
    ],
)
def test_bad_timers_are_refused_and_nothing_is_stored(store: Store, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        store.add_timer("bad", T, {}, **kwargs)  # type: ignore[arg-type]
    assert store.timers(include_done=True) == []


@pytest.mark.parametrize("due", [-1, 10**17, 2**70])
def test_a_due_time_no_date_can_show_is_refused(store: Store, due: int) -> None:
    with pytest.raises(ValueError, match="between 1970-01-01 and 9999-01-01"):
        store.add_timer("far", due, {})
    assert store.timers(include_done=True) == []


def test_a_timer_id_must_be_text(store: Store) -> None:
    with pytest.raises(ValueError, match="timer id"):
        store.add_timer("  ", T, {})


@pytest.mark.parametrize(("day", "expected"), [(date(2026, 3, 29), 23), (date(2026, 10, 25), 25),
                                               (date(2026, 6, 1), 24)])
def test_an_hourly_local_cron_follows_elapsed_hours_across_dst(store: Store, day: date, expected: int) -> None:
    """A wildcard-hour job is periodic: the night the clocks go back it runs in both 02:00 hours, so
    there is never a two-hour gap; the night they go forward the missing hour has nothing to run."""
    start = epoch(day.year, day.month, day.day)
    end = epoch(*(day + timedelta(days=1)).timetuple()[:3])
    store.add_timer("hourly", start, {}, cron="0 * * * *", tz="Europe/Berlin")
    now = start
    while now < end:
        store.run_scheduler(now=now)
        timer = store.timer("hourly")
        assert timer is not None
        now = timer.due
    fired = [int(str(p["scheduled_for"])) for p in timer_events(store, "hourly")]
    assert len(fired) == expected
    assert {b - a for a, b in pairwise(fired)} == {HOUR}


def test_a_long_cron_outage_is_walked_without_holding_the_write_lock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting two days of missed per-minute occurrences takes a while; meanwhile a webhook
    receiver on another connection must still be able to store events."""
    start = epoch(2026, 5, 1)
    store.add_timer("minutely", start, {}, cron="* * * * *", tz="Europe/Berlin")
    receiver = store.reopen()
    wait_for_locks_at_most(receiver, 200)  # a held lock would make its ingest fail fast
    stored_during_walk: list[bool] = []
    real_occurrences = timers_module.cron_occurrences

    def occurrences_with_an_ingest(expression: str, tz: str | None, after: int) -> Iterator[int]:
        for count, moment in enumerate(real_occurrences(expression, tz, after)):
            if count == 1_000:
                stored_during_walk.append(receiver.ingest("github", f"d-{len(stored_during_walk)}", {}, now=start))
            yield moment

    monkeypatch.setattr(timers_module, "cron_occurrences", occurrences_with_an_ingest)
    try:
        assert store.run_scheduler(now=start + 2 * DAY + 30) == 1
    finally:
        receiver.close()
    assert stored_during_walk == [True]
    [payload] = timer_events(store, "minutely")
    assert (payload["skipped"], payload["late_by"], payload["scheduled_for"]) == (2 * 24 * 60, 30, start + 2 * DAY)


def test_a_cron_whose_last_year_is_past_is_refused(store: Store) -> None:
    now = 1_800_000_000  # 2027
    with pytest.raises(ValueError, match="never fires after"):
        store.add_timer("old", now, {}, cron="0 0 1 1 * 0 2020", now=now)  # the 7th field is the year
    with pytest.raises(ValueError, match="never fires"):
        validate_cron("0 0 1 1 * 0 2020", "UTC", now=now)
    validate_cron("0 0 1 1 * 0 2020", "UTC", now=1_500_000_000)  # from 2017 it still fires once


def test_a_cron_that_stops_firing_fires_its_last_occurrence_and_is_done(store: Store) -> None:
    start = 1_800_000_000  # 2027-01-15
    store.add_timer("once-in-2028", start, {"task": "new year"}, cron="0 0 1 1 * 0 2028", tz="UTC", now=start)
    timer = store.timer("once-in-2028")
    assert timer is not None and timer.due == 1_830_297_600  # 2028-01-01T00:00:00Z
    assert store.run_scheduler(now=timer.due + 60) == 1
    event = store.find_event("timer", f"once-in-2028@{timer.due}")
    assert event is not None and event.payload["task"] == "new year"
    after = store.timer("once-in-2028")
    assert after is not None and after.done  # no occurrence left: like a one-off that fired
    assert store.run_scheduler(now=timer.due + 10 * 86_400) == 0
    assert store.next_timer() is None


def test_run_now_fires_one_extra_occurrence_and_leaves_the_schedule(store: Store) -> None:
    store.add_timer("tick", T + HOUR, {"task": "tick"}, every=HOUR, now=T)
    store.pause_timer("tick", True)
    assert store.fire_timer_now("tick", now=T + 60) == "fired"
    assert store.fire_timer_now("tick", now=T + 60) == "duplicate"  # the same second: one occurrence
    assert store.fire_timer_now("nope", now=T + 60) == "unknown"
    [event] = store.events(source="timer")
    assert event.source_id == f"tick@{T + 60}"
    assert event.payload == {"task": "tick", "scheduled_for": T + 60, "late_by": 0, "skipped": 0}
    timer = store.timer("tick")
    assert timer is not None and (timer.due, timer.paused, timer.last_fired_at) == (T + HOUR, True, T + 60)
    store.request_approval("apr-1", "deploy", now=T, expires_in=600)
    with pytest.raises(ValueError, match="expiry of an approval"):
        store.fire_timer_now("expire:apr-1", now=T + 60)
