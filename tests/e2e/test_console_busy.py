"""Issue 36, item 3, in real terminals: the real console quitting while a run is in progress says so at once and
waits for the run (a clean finish, not a refused late one); two real consoles on one inbox with a Telegram channel
(the stand-in Bot API): the holder stalls, the other takes over, the stalled one says who holds the lease now and
under which generation, and the Bot API never sees two long polls at once."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from console.core import Store
from tests.e2e.test_console_pty import Terminal
from tests.edges.phone_standins import StandInBotApi, served_in_a_thread

pexpect = pytest.importorskip("pexpect")

OWNER = 4242
TOKEN = "123456:stand-in-token"  # the stand-in's own


def flat(text: str) -> str:
    return " ".join(text.split())


def toast_text(screen: str, title: str, rows: int = 6) -> str:
    """The words of the toast titled `title`, its wrapped lines joined (a toast sits at the screen's right edge,
    over a pane whose border may show beside it: each of its lines is the rest of the row from where its title
    starts); '' when none is shown."""
    lines = screen.split("\n")
    for row, line in enumerate(lines):
        column = line.find(title)
        if column >= 0:
            return flat(" ".join(part[column:].rstrip("│ ") for part in lines[row:row + rows]))
    return ""


def wait_all(terms: Sequence[Terminal], condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Wait for a condition while every terminal is read (a console whose terminal nobody reads stops drawing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for term in terms:
            term.pump()
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what}; screens:\n" + "\n\n".join(t.text() for t in terms))


def test_quit_while_a_run_is_in_progress_says_so_at_once_and_waits_for_the_run(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    with Store.open(db) as store:  # six one-second chunks of the offline agent's long task
        store.ingest("task", "long-1", {"long_task": 6}, now=int(time.time()))
    term = Terminal(db, tmp_path)
    try:
        term.wait_for(lambda s: "Events" in s and "active" in s, "the console to start and take the lease")
        with Store.open(db, check=False) as store:
            event = store.find_event("task", "long-1")
        assert event is not None

        def running() -> bool:
            with Store.open(db, check=False) as store:
                found = store.find_event("task", "long-1")
                return found is not None and found.status == "running"

        wait_all([term], running, "the long task running")
        term.send("q")
        term.wait_for(lambda s: "Quit anyway?" in flat(s), "the question: a run is in progress")
        term.send("y")
        term.wait_for(lambda s: f"waiting for run #{event.id}" in toast_text(s, "Quitting"),
                      "the quitting toast while the run still holds the quit")
        assert term.child.isalive()  # said while the console waits for the run, not after
        term.child.expect(pexpect.EOF, timeout=60)
    finally:
        term.child.close(force=True)
    assert term.child.exitstatus == 0, term.text()
    with Store.open(db) as store:
        done = store.find_event("task", "long-1")
        assert done is not None and done.status == "done"  # the quit waited for it
        assert store.refused_finish_count() == 0  # a clean finish, not fencing
        assert store.lease_log(1)[0][1] == "release"


@pytest.mark.parametrize("stall", ["x", "SIGSTOP"])
def test_a_stalled_console_is_taken_over_says_so_and_telegram_sees_no_conflict(tmp_path: Path, stall: str) -> None:
    """x: the console stops renewing (and closes its long poll at once); SIGSTOP: the process freezes with its long
    poll open, which then ends on the Bot API before the lease lapses (it asked for no longer), and the console
    woken past its lease polls no more and says it was taken over."""
    db = tmp_path / "inbox.db"
    with served_in_a_thread(lambda: StandInBotApi(token=TOKEN)) as bot:
        config = tmp_path / "config.toml"
        config.write_text(
            f'[webhooks]\nsecrets_file = {json.dumps(str(tmp_path / "secrets.env"))}\n\n'
            f'[[channels]]\ntype = "telegram"\ntoken_env = "TG_TEST_TOKEN"\nchat_id = {OWNER}\n'
            f'api_base = {json.dumps(bot.url)}\nbatch_window = 0\n')  # each message stored as it comes: no
        # two-second gathering of a burst before each of the two messages this test waits for
        env = {"TG_TEST_TOKEN": TOKEN, "AGENT_CONSOLE_LEASE_TTL": "6"}
        first = Terminal(db, tmp_path / "first", args=["--config", str(config)], env=env)
        second: Terminal | None = None
        try:
            first.wait_for(lambda s: "Events" in s and "active" in s, "the first console to take the lease")
            second = Terminal(db, tmp_path / "second", args=["--config", str(config)], env=env, size=(120, 40))
            terms = [first, second]
            wait_all(terms, lambda: "standby" in second.text(), "the second console on standby")
            wait_all(terms, lambda: bot._waiting == 1, "the holder's long poll waiting")
            with Store.open(db, check=False) as store:
                held = store.lease()
            assert held is not None
            if stall == "x":
                first.send("x")  # stall: the first console stops renewing its lease
                wait_all(terms, lambda: "Worker stalled" in first.text(), "the stall said")
            else:
                first.child.kill(signal.SIGSTOP)  # frozen, its long poll open

            def taken() -> bool:
                with Store.open(db, check=False) as store:
                    lease = store.lease()
                return lease is not None and lease.holder != held.holder

            wait_all(terms, taken, "the second console's takeover")
            with Store.open(db, check=False) as store:
                lease = store.lease()
            assert lease is not None and lease.gen == held.gen + 1
            wait_all(terms, lambda: "active" in second.text(), "the second console active")
            assert bot.loop is not None
            _, message_id = asyncio.run_coroutine_threadsafe(
                bot.write(OWNER, "written after the takeover"), bot.loop).result(10)

            wait_all(terms, lambda: stored_event(db, message_id), "the message stored by the new holder")
            assert bot.conflicts == 0  # no poll of the stalled console was open when the new holder polled
            if stall == "x":
                said = f"holds the lease now (generation {lease.gen}); this console is stalled"
            else:
                first.child.kill(signal.SIGCONT)  # woken past its lease
                said = f"Another worker holds the lease (generation {lease.gen}): this console is standby"
            wait_all(terms, lambda: said in toast_text(first.text(), "Taken over"),
                     "the first console naming the new generation")
            _, again = asyncio.run_coroutine_threadsafe(
                bot.write(OWNER, "written once both are awake"), bot.loop).result(10)
            wait_all(terms, lambda: stored_event(db, again), "the second message stored by the holder")
            assert bot.conflicts == 0  # the first console, awake, polled no more
            with Store.open(db, check=False) as store:
                assert store.chat_health("telegram")[0] == "ok"
            for term in terms:
                term.send("\x11")  # ctrl+q
            for term in terms:
                term.child.expect(pexpect.EOF, timeout=60)
        finally:
            for term in (first, second):
                if term is not None:
                    if term.child.isalive():
                        term.child.kill(signal.SIGCONT)
                    term.child.close(force=True)
    assert (first.child.exitstatus, second.child.exitstatus if second else None) == (0, 0)
    assert not re.search(r"409|conflict", flat(first.text() + second.text() if second else ""), re.IGNORECASE)


def stored_event(db: Path, message_id: int) -> bool:
    with Store.open(db, check=False) as store:
        return store.find_event("telegram", f"{OWNER}:{message_id}") is not None
