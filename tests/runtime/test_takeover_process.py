"""Real processes: a headless `run` killed with SIGKILL mid-task, and a second `run` that takes over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store
from tests.support import inbox_until

ROOT = Path(__file__).resolve().parents[2]
TTL = 2


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(ROOT), AGENT_CONSOLE_LEASE_TTL=str(TTL), AGENT_CONSOLE_BACKOFF_BASE="0")
    return env


def cli(db: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", "--db", str(db), *args], cwd=ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=60, check=False)


def start_worker(db: str | Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "run"], cwd=ROOT,
                                env=cli_env(), stdout=sink, stderr=sink)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_sigkill_mid_task_then_a_second_worker_takes_over_without_repeating_steps(
    tmp_path: Path, inbox_target: str, workers: list[subprocess.Popen[bytes]]
) -> None:
    db = inbox_target
    log = tmp_path / "workers.log"
    first = start_worker(db, log)
    workers.append(first)
    assert cli(db, "ingest", "jobs", "long-1", '{"long_task": 5}').stdout.strip() == "stored"
    event_id = inbox_until(db, lambda s: (e := s.find_event("jobs", "long-1")) and e.id)
    first_holder = inbox_until(db, lambda s: (lease := s.lease()) and lease.holder)
    # Two chunks committed: the first worker is mid-task.
    inbox_until(db, lambda s: (step := s.journal_step(f"long:{event_id}:1")) and step.state == "committed")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second = start_worker(db, log)
    workers.append(second)
    done = inbox_until(db, lambda s: (e := s.event(event_id)) and e.status == "done" and e)
    with Store.open(db, check=False) as store:
        assert done.attempts == 2
        for chunk in (0, 1):
            step = store.journal_step(f"long:{event_id}:{chunk}")
            assert step is not None and step.executions == 1, f"chunk {chunk} ran again after the takeover"
        assert all(store.journal_step(f"long:{event_id}:{n}").state == "committed" for n in range(5))
        takeovers = [row for row in store.lease_log() if row[1] == "takeover"]
        assert takeovers and takeovers[0][4] == first_holder and takeovers[0][2] != first_holder
        history = [(a.kind, a.gen) for a in store.history(event_id)]
        assert ("lost", 1) in history and history[-1][0] == "finish"
        assert store.integrity_check() == "ok"
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=20) == 0


def test_sigkill_of_the_holder_lets_the_running_standby_take_over_within_the_lease_time(
    tmp_path: Path, inbox_target: str, workers: list[subprocess.Popen[bytes]]
) -> None:
    """Two engines on one inbox: one holds the lease, the other stands by. The holder is killed; the
    standby takes the next generation once the dead holder's lease has run out, and no later than a
    lease time after that, then works the inbox."""
    log = tmp_path / "workers.log"
    Store.open(inbox_target).close()  # the inbox made first: the two engines start on it together
    workers.extend([start_worker(inbox_target, log), start_worker(inbox_target, log)])
    first_holder = inbox_until(inbox_target, lambda s: (lease := s.lease()) and lease.holder)
    holder_pid = int(first_holder.split(":")[1])
    (holder,) = [proc for proc in workers if proc.pid == holder_pid]
    (standby,) = [proc for proc in workers if proc.pid != holder_pid]
    # The standby is up (it renews nothing, but it has run a claim attempt and logged its mode).
    inbox_until(inbox_target, lambda _s: b"mode: standby" in log.read_bytes())
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with Store.open(inbox_target, check=False) as store:
        dead_lease = store.lease()
    assert dead_lease is not None and dead_lease.holder == first_holder
    taken = inbox_until(inbox_target, lambda s: [row for row in s.lease_log() if row[1] == "takeover"])
    at, _kind, new_holder, gen, previous = taken[0]
    assert (previous, gen) == (first_holder, dead_lease.gen + 1) and new_holder != first_holder
    assert dead_lease.until < at <= dead_lease.until + TTL + 1  # as soon as the lease ran out, give or take a tick
    assert cli(inbox_target, "ingest", "chat", "after", '{"text": "still there?"}').stdout.strip() == "stored"
    inbox_until(inbox_target, lambda s: (e := s.find_event("chat", "after")) and e.status == "done")
    standby.send_signal(signal.SIGTERM)
    assert standby.wait(timeout=20) == 0
