"""`agent-console run` as a real process: it works events another process ingests, logs to stderr, and
stops with exit code 0 on SIGTERM, SIGINT or SIGHUP (a closed terminal), releasing its lease at once."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core import Store
from tests.cli.helpers import ROOT, assert_user_error, run_process
from tests.support import wait_until

pytest.importorskip("console.runtime.engine", reason="the headless engine (console.runtime.engine) is not merged yet")

TTL = 5  # small, so a test that waited out the lease instead of seeing it released would notice


class Runner:
    def __init__(self, db: Path, env: dict[str, str], log: Path, ttl: int = TTL) -> None:
        self.db = db
        self.log = log
        self.handle = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "console", "--db", str(db), "run"],
            cwd=ROOT, env=dict(env, AGENT_CONSOLE_LEASE_TTL=str(ttl)), stdout=subprocess.DEVNULL, stderr=self.handle,
        )

    def stderr(self) -> str:
        return self.log.read_text()

    def wait_active(self) -> None:
        def active() -> bool:
            assert self.process.poll() is None, f"run exited early:\n{self.stderr()}"
            return "mode: active" in self.stderr()

        wait_until(active, "the engine to hold the lease")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.handle.close()


@pytest.fixture
def runner(tmp_path: Path, isolated: dict[str, str]) -> Iterator[Runner]:
    started = Runner(tmp_path / "inbox.db", isolated, tmp_path / "run.log")
    try:
        yield started
    finally:
        started.close()


def event_status(db: Path, source: str, source_id: str) -> str | None:
    with Store.open(db, check=False) as store:
        event = store.find_event(source, source_id)
    return None if event is None else event.status


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_run_works_an_event_from_another_process_and_stops_cleanly(
    runner: Runner, isolated: dict[str, str], signum: signal.Signals
) -> None:
    runner.wait_active()
    ingest = run_process(["--db", str(runner.db), "ingest", "chat", "m-1", '{"text": "hello"}'], isolated)
    assert (ingest.returncode, ingest.stdout) == (0, "stored\n")
    wait_until(lambda: event_status(runner.db, "chat", "m-1") == "done", "the event to be done")

    live = json.loads(run_process(["--db", str(runner.db), "status", "--json"], isolated).stdout)
    assert live["lease"]["live"] is True and live["events"]["done"] >= 1

    runner.process.send_signal(signum)
    assert runner.process.wait(timeout=30) == 0, runner.stderr()

    after = run_process(["--db", str(runner.db), "status", "--json"], isolated)
    lease = json.loads(after.stdout)["lease"]
    assert lease["live"] is False
    assert lease["gen"] == live["lease"]["gen"]
    with Store.open(runner.db) as store:
        last_change = store.lease_log(1)[0]
    assert last_change[1] == "release"  # given up, not left to lapse

    log = runner.stderr()
    assert "Traceback" not in log
    assert "engine started" in log and "holding the lease as generation" in log
    assert "run 1: 1 event(s)" in log and "run 1 done" in log
    assert "engine stopped" in log


def test_a_standby_run_takes_over_at_once_when_the_active_one_stops(
    tmp_path: Path, isolated: dict[str, str]
) -> None:
    # A lease far longer than wait_until's limit: the standby engine can only become active in time
    # because the first one released the lease on SIGTERM.
    runners = [Runner(tmp_path / "inbox.db", isolated, tmp_path / "first.log", ttl=600)]
    try:
        first = runners[0]
        first.wait_active()
        second = Runner(first.db, isolated, tmp_path / "second.log", ttl=600)
        runners.append(second)
        wait_until(lambda: "mode: standby" in second.stderr(), "the second engine to stand by")
        with Store.open(first.db) as store:
            held = store.lease()
        assert held is not None
        # On standby, `run` says who holds the lease, which generation, and until when.
        assert f"standby: the lease is held by {held.holder}, generation 1, until " in second.stderr()
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(timeout=30) == 0
        second.wait_active()
        with Store.open(first.db) as store:
            lease = store.lease()
        assert lease is not None and lease.gen == 2 and lease.until > time.time()
        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(timeout=30) == 0
    finally:
        for runner in runners:
            runner.close()


def test_run_with_an_unusable_inbox_is_a_one_line_error(tmp_path: Path, isolated: dict[str, str]) -> None:
    done = run_process(["--db", str(tmp_path / "missing" / "inbox.db"), "run"], isolated)
    assert_user_error(done.returncode, done.stdout, done.stderr, "does not exist")


WEBHOOKS_CONFIG = """
[webhooks]
enabled = true
port = {port}
[webhooks.sources.github]
verifier = "github"
secret_env = "RUN_TEST_MISSING_SECRET"
"""


@pytest.mark.parametrize("fault", ["missing secret", "port in use"])
def test_run_with_a_webhook_receiver_it_cannot_start_does_no_work(
    tmp_path: Path, isolated: dict[str, str], fault: str
) -> None:
    db, config = tmp_path / "inbox.db", tmp_path / "config.toml"
    with Store.open(db) as store:
        store.ingest("chat", "m1", {"text": "hello"}, now=int(time.time()))
    env = dict(isolated)
    if fault == "port in use":
        env["RUN_TEST_MISSING_SECRET"] = "a-secret-for-the-test"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config.write_text(WEBHOOKS_CONFIG.format(port=taken.getsockname()[1]))
        done = run_process(["--db", str(db), "--config", str(config), "run"], env)
    expected = "RUN_TEST_MISSING_SECRET is not set" if fault == "missing secret" else "cannot listen on"
    assert_user_error(done.returncode, done.stdout, done.stderr, expected)
    with Store.open(db) as store:
        event = store.find_event("chat", "m1")
        assert event is not None and event.status == "pending" and event.attempts == 0  # nothing was run
        assert store.lease() is None  # the engine never started


def test_run_with_a_digest_cron_that_never_fires_is_a_one_line_error(tmp_path: Path,
                                                                     isolated: dict[str, str]) -> None:
    db = tmp_path / "inbox.db"
    done = run_process(["--db", str(db), "run"], dict(isolated, AGENT_CONSOLE_DIGEST_CRON="0 9 31 2 *"))
    assert_user_error(done.returncode, done.stdout, done.stderr, "digest_cron", "AGENT_CONSOLE_DIGEST_CRON",
                      "'0 9 31 2 *' never fires")
    assert not db.exists()  # refused before the inbox was opened
