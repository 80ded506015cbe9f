"""Real processes (issue 35): a schedule firing every two seconds while headless `run`s are SIGKILLed around its
fires and taken over. Every occurrence is accounted for exactly once, either stored as its own event or counted
in the `skipped` of the one that coalesced it, and the owner is told once, across the kills, that it expires
within a day."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import ScheduleDraft, ScheduleSpec, Store
from tests.cli.helpers import isolated_env
from tests.support import inbox_until

ROOT = Path(__file__).resolve().parents[2]
EVERY = 2
KILLS = 3


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def occurrences(store: Store) -> list[tuple[int, int]]:
    """(scheduled_for, skipped) of the schedule's stored occurrences, in order."""
    return sorted((int(e.payload["scheduled_for"]), int(e.payload["skipped"]))
                  for e in store.events(source="timer", limit=10_000) if e.source_id.startswith("schedule:beat@"))


def test_sigkills_around_fires_store_each_occurrence_once_and_tell_the_expiry_once(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    db, log = tmp_path / "inbox.db", tmp_path / "workers.log"
    anchor = int(time.time()) + EVERY
    # The gateway refuses a schedule this frequent (min_schedule_interval); the core fires what it is given.
    spec = ScheduleSpec("beat", "heartbeat", "look around", "every", at=anchor, every=EVERY,
                        expires_at=anchor + 3600)
    with Store.open(db) as store, store.write_transaction():
        store._write_schedule(ScheduleDraft(spec, None), anchor - EVERY)
    env = isolated_env(tmp_path, AGENT_CONSOLE_LEASE_TTL="2", AGENT_CONSOLE_BACKOFF_BASE="0",
                       AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *")

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as sink:
            worker = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "run"], cwd=ROOT, env=env,
                                      stdout=sink, stderr=sink)
        workers.append(worker)
        return worker

    worker = start()
    for _ in range(KILLS):
        seen = inbox_until(db, lambda s: len(occurrences(s)), "an occurrence", limit=60)
        inbox_until(db, lambda s, seen=seen: len(occurrences(s)) >= seen + 1, "the next occurrence", limit=60)
        worker.send_signal(signal.SIGKILL)  # around a fire: the next one is due within two seconds
        worker.wait(timeout=10)
        worker = start()
    inbox_until(db, lambda s: len(occurrences(s)) >= KILLS + 3 and s.counts()["pending"] == 0, "more fires",
                limit=60)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, log.read_text()

    with Store.open(db, check=False) as store:
        fired = occurrences(store)
        notices = [m.body for m in store.outbox_messages(limit=1000) if m.body.startswith("Schedule beat")]
    moments = [moment for moment, _ in fired]
    assert all((moment - anchor) % EVERY == 0 for moment in moments)  # on the schedule's grid
    assert moments == sorted(set(moments))  # none stored twice
    # Each occurrence from the first to the last once: stored, or coalesced into the next one stored.
    assert sum(1 + skipped for _, skipped in fired) == (moments[-1] - anchor) // EVERY + 1
    assert len(notices) == 1 and "expires at" in notices[0]
