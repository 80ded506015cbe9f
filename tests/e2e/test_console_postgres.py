"""The real console in a pseudo-terminal, attached to a PostgreSQL inbox that two real engines share:
it shows the holder's work and the standby's takeover live."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from console.core import Store
from tests.e2e.test_console_pty import Terminal
from tests.support import inbox_until

pexpect = pytest.importorskip("pexpect")

ROOT = Path(__file__).resolve().parents[2]
TTL = 3


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(url: str) -> subprocess.Popen[bytes]:
        with (tmp_path / "engines.log").open("ab") as sink:
            proc = subprocess.Popen([sys.executable, "-m", "console", "--db", url, "run"], cwd=ROOT,
                                    env=os.environ.copy(), stdout=sink, stderr=sink)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_the_console_on_postgresql_sees_the_holder_work_and_the_standby_take_over(
    tmp_path: Path, postgres_url: str, engines: Callable[[str], subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENT_CONSOLE_LEASE_TTL", str(TTL))
    monkeypatch.setenv("AGENT_CONSOLE_BACKOFF_BASE", "0")
    first = engines(postgres_url)
    first_holder = inbox_until(postgres_url, lambda s: (lease := s.lease()) and lease.holder,
                               "the first engine's lease")
    engines(postgres_url)
    inbox_until(postgres_url, lambda _s: b"mode: standby" in (tmp_path / "engines.log").read_bytes(),
             "the second engine standing by")

    term = Terminal(postgres_url, tmp_path)  # type: ignore[arg-type]  # the console takes a URL as --db
    try:
        term.wait_for(lambda s: "Events" in s and "gen 1" in s and "(other)" in s,
                      "the console to show the other engine's lease")
        with Store.open(postgres_url) as store:
            assert store.ingest("chat", "from-the-phone", {"text": "hello"}, now=int(time.time()))
        term.wait_for(lambda s: re.search(r"chat +hello +done", s) is not None, "the holder's run, seen live")

        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        term.wait_for(lambda s: "gen 2" in s, "the takeover, seen live", timeout=TTL + 30)
        with Store.open(postgres_url) as store:
            lease = store.lease()
            assert lease is not None and lease.gen == 2 and lease.holder != first_holder
        term.send("\x11")  # ctrl+q
        term.child.expect(pexpect.EOF, timeout=30)
    finally:
        term.child.close(force=True)
    assert term.child.exitstatus == 0, term.text()
