"""Start like you run (issue 37 item 3): `run` (and `serve`, the console: one System.start) waits out a passing
fault at start (the inbox busy past its wait, its server unreachable, a lost session) with the running engine's
backoff, one line each try, and starts once it passes; a permanent fault (a refused login, damage, a moved inbox,
a newer schema) is one line and exit 2 at once. Real processes on a real inbox."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from console.core import Store
from tests.cli.helpers import isolated_env
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def started_with_log(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen([sys.executable, "-m", "console", *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert process.stderr is not None
    threading.Thread(target=lambda: lines.extend(iter(process.stderr.readline, "")), daemon=True).start()
    return process, lines


def test_run_waits_out_the_inbox_busy_at_start_one_line_each_try_then_runs(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    Store.open(db).close()
    # Each try waits busy_timeout for the lock before it counts the inbox busy: one second, not the default five.
    env = isolated_env(tmp_path, AGENT_CONSOLE_DB=str(db), AGENT_CONSOLE_DIGEST_CRON="0 9 1 1 *",
                       AGENT_CONSOLE_BUSY_TIMEOUT="1")
    with Store.open(db) as holder, holder.storage.transaction():  # another writer holds the inbox's write lock
        run, lines = started_with_log(["run"], env)
        try:
            wait_until(lambda: sum("could not start" in line for line in lines) >= 2 or run.poll() is not None,
                       "two tries at start", limit=90)
        except BaseException:
            run.kill()
            raise
    assert run.poll() is None, "".join(lines)  # still trying, not exited
    try:
        wait_until(lambda: any("engine started" in line for line in lines), "the start once the lock is free",
                   limit=120)
        with Store.open(db, read_only=True) as store:
            wait_until(lambda: (lease := store.lease()) is not None and f":{run.pid}:" in lease.holder,
                       "the lease taken")
    finally:
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 0
    text = "".join(lines)
    assert "Traceback" not in text, text
    tries = [line for line in lines if "could not start" in line]
    first = r"could not start: the inbox is busy \(.*held it for 1000 ms\); trying again in 1 s$"
    assert re.search(first, tries[0].rstrip()), tries
    assert "trying again in 2 s" in tries[1]


def test_a_refused_login_is_one_line_and_exit_2_at_once(tmp_path: Path, postgres_server: object) -> None:
    from tests.pg_server import PostgresServer

    assert isinstance(postgres_server, PostgresServer)
    url = f"postgresql://nobody-here@127.0.0.1:{postgres_server.port}/postgres?schema=refused"
    run = subprocess.run([sys.executable, "-m", "console", "--db", url, "run"], cwd=ROOT, env=isolated_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "could not start" not in run.stderr
    assert 'refused the login: role "nobody-here" does not exist' in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
