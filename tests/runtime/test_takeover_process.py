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


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", "--db", str(db), *args], cwd=ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=60, check=False)


def start_worker(db: Path, log: Path) -> subprocess.Popen[bytes]:
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
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    db = tmp_path / "inbox.db"
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
