"""Schedules in the core (issue 35), on both engines: each occurrence once across DST changes, clock jumps and
restarts over many simulated occurrences (an injected clock), expiry that stops a schedule however late the
scheduler runs, renewal that resumes it, the owner told once the day before it expires, pause and resume."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo

from console.core import RunOutcome, ScheduleDraft, ScheduleSpec, Store
from console.core.schedules import fires

BERLIN = ZoneInfo("Europe/Berlin")
DAY = 86_400


def epoch(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp())


START = epoch(2026, 1, 1)
UNTRUSTED = {"trusted": False, "event_id": 1, "source": "github", "source_id": "d-1", "tainted_by": ["github d-1"]}


def create(store: Store, spec: ScheduleSpec, *, now: int = START, origin: object = None) -> None:
    """A schedule as a run's fenced finish writes it."""
    assert store.ingest("chat", f"ask-{spec.id}-{now}", {"text": "schedule it"}, now=now)
    gen = store.acquire("w", now=now)
    assert gen is not None
    events = store.claim_batch("w", gen, now=now)
    assert store.finish_run("w", gen, [e.id for e in events], RunOutcome(schedules=[ScheduleDraft(spec, origin)]),
                            now=now)
    store.release("w", gen)


def occurrences(store: Store, schedule_id: str) -> list[int]:
    return sorted(int(e.payload["scheduled_for"]) for e in store.events(source="timer", limit=100_000)
                  if e.source_id.startswith(f"schedule:{schedule_id}@"))


def test_a_nightly_schedule_fires_each_night_once_through_both_dst_changes_and_clock_jumps(sqlite_store: Store) -> None:
    # A year of passes: on SQLite alone (the fires are the core's Python; each engine's writes are the tests below).
    store = sqlite_store
    # 02:30 Berlin does not exist on 29 March and happens twice on 25 October: once each night all the same.
    spec = ScheduleSpec("nightly", "backup", "run the backup", "cron", cron="30 2 * * *", tz="Europe/Berlin",
                        expires_at=epoch(2027, 1, 1))
    create(store, spec)
    planned = fires(spec, START, 400)
    assert len(planned) == 365
    moment, ticks = START, 0
    while moment < epoch(2027, 1, 2):
        due = store.next_timer()
        if due is not None and due.due <= moment:  # as the engine's scheduler does: a pass when one is due
            store.run_scheduler(now=moment)
        if ticks % 50 == 0:  # the clock jumps back an hour now and then (NTP, a VM restored): nothing fires twice
            store.run_scheduler(now=moment - 3600)
        moment += 7 * 3600 + 13 * 60  # the scheduler wakes at odd times, never on the dot
        ticks += 1
    fired = occurrences(store, "nightly")
    assert fired == planned  # every night once, in order, as the preview said
    off_time = {datetime.fromtimestamp(m, BERLIN).strftime("%m-%d %H:%M") for m in fired} - \
        {datetime.fromtimestamp(m, BERLIN).strftime("%m-%d 02:30") for m in fired}
    assert off_time == {"03-29 03:00"}  # the night 02:30 does not exist it runs as the clocks jump, as timers do
    assert Counter(datetime.fromtimestamp(m, BERLIN).date() for m in fired).most_common(1)[0][1] == 1


def test_an_expired_schedule_fires_no_more_even_after_an_outage_and_renewal_resumes_it(store: Store) -> None:
    spec = ScheduleSpec("hourly", "poll", "poll the feed", "every", at=START + 3600, every=3600,
                        expires_at=START + 5 * 3600)
    create(store, spec, origin=UNTRUSTED)
    store.run_scheduler(now=START + 3 * 3600 + 10)  # occurrences 1-3, coalesced into one
    assert occurrences(store, "hourly") == [START + 3 * 3600]
    store.run_scheduler(now=START + 9 * 3600)  # down across the expiry: no late occurrence fires
    assert occurrences(store, "hourly") == [START + 3 * 3600]
    stored = store.schedule("hourly")
    assert stored is not None and stored.shown_state(START + 9 * 3600) == "expired" and not stored.trusted
    expires = store.renew_schedule("hourly", now=START + 9 * 3600 + 60)
    assert expires == START + 9 * 3600 + 60 + 30 * DAY
    store.run_scheduler(now=START + 10 * 3600)
    assert occurrences(store, "hourly") == [START + 3 * 3600, START + 10 * 3600]  # on its grid, from now on
    (event,) = [e for e in store.events(source="timer") if e.source_id == f"schedule:hourly@{START + 10 * 3600}"]
    assert event.payload["origin"] == UNTRUSTED  # its occurrences keep the untrusted origin


def test_the_owner_is_told_once_the_day_before_a_schedule_expires(store: Store) -> None:
    spec = ScheduleSpec("weekly", "report", "write the report", "every", at=START + DAY, every=7 * DAY,
                        expires_at=START + 10 * DAY)
    create(store, spec)
    assert store.next_expiry_notice() == START + 9 * DAY
    assert store.tell_expiring_schedules(now=START + 9 * DAY - 1) == 0
    assert store.tell_expiring_schedules(now=START + 9 * DAY, zone="Europe/Berlin") == 1
    assert store.tell_expiring_schedules(now=START + 9 * DAY + 60) == 0
    (message,) = [m.body for m in store.outbox_messages() if "weekly" in m.body]
    assert "expires at 2026-01-11 00:00" in message and "agent-console schedules renew weekly" in message
    store.renew_schedule("weekly", now=START + 9 * DAY + 120)
    assert store.next_expiry_notice() == START + 9 * DAY + 120 + 29 * DAY  # told again before the new expiry


def test_pause_holds_its_occurrences_and_resume_goes_on_from_the_next_one(store: Store) -> None:
    spec = ScheduleSpec("p", "ping", "ping", "every", at=START + 3600, every=3600, expires_at=START + 30 * DAY)
    create(store, spec)
    assert store.pause_schedule("p", now=START + 100)
    store.run_scheduler(now=START + 5 * 3600)
    assert occurrences(store, "p") == []
    assert store.schedule("p").shown_state(START + 5 * 3600) == "paused"  # type: ignore[union-attr]
    assert store.resume_schedule("p", now=START + 5 * 3600 + 10)
    store.run_scheduler(now=START + 6 * 3600)
    assert occurrences(store, "p") == [START + 6 * 3600]  # what it missed while paused does not fire
    assert store.delete_schedule("p") and store.schedule("p") is None
    store.run_scheduler(now=START + 9 * 3600)
    assert occurrences(store, "p") == [START + 6 * 3600]
    assert store.timers(include_done=True) == []  # a schedule's timer is not listed among the timers
