"""The real `agent-console` in a pseudo-terminal: inject by keyboard, an approval's toast, approve, quit, check
the file."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from console.core import Store

pexpect = pytest.importorskip("pexpect")
pyte = pytest.importorskip("pyte")

ROOT = Path(__file__).resolve().parents[2]
ROWS, COLS = 24, 80


class Terminal:
    def __init__(self, db: Path | None, home: Path, *, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, size: tuple[int, int] = (COLS, ROWS)) -> None:
        """The console on db (None: no --db) with args after it, its user folders under home, env added, in a
        terminal of size (columns, rows)."""
        cols, rows = size
        env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color", XDG_CONFIG_HOME=str(home / "config"),
                   XDG_DATA_HOME=str(home / "data"), XDG_STATE_HOME=str(home / "state"), COLUMNS=str(cols),
                   LINES=str(rows), **(env or {}))
        env.pop("TEXTUAL", None)
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()  # every byte the console wrote to the terminal
        inbox = ["--db", str(db)] if db is not None else []
        self.child = pexpect.spawn(sys.executable, ["-m", "console", *inbox, *args], cwd=str(ROOT), env=env,
                                   dimensions=(rows, cols))

    def text(self) -> str:
        return "\n".join(self.screen.display)

    def pump(self) -> None:
        while True:
            try:
                chunk = self.child.read_nonblocking(65536, timeout=0.05)
            except pexpect.TIMEOUT:
                return
            except pexpect.EOF:
                return
            self.raw += chunk
            self.stream.feed(chunk)

    def wait_for(self, condition: Callable[[str], bool], what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump()
            if condition(self.text()):
                return
            if not self.child.isalive():
                break
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.text()}")

    def send(self, keys: str) -> None:
        self.child.send(keys)


def test_inject_approve_quit_in_a_real_terminal(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    term = Terminal(db, tmp_path)
    try:
        term.wait_for(lambda s: "Events" in s and "active" in s, "the console to start and take the lease")
        term.send("i")
        term.wait_for(lambda s: "Inject an event" in s, "the inject modal")
        term.send("\x13")  # ctrl+s: inject the pre-filled chat event
        term.wait_for(lambda s: "Inject an event" not in s, "the modal to close")
        term.send("a")  # a test key: outside the demo it writes nothing
        term.send("i")
        term.wait_for(lambda s: "Inject an event" in s, "the inject modal again")
        term.send("\x1b")  # escape: closed without storing
        term.wait_for(lambda s: "Inject an event" not in s, "the modal to close")
        with Store.open(db) as store:  # another process asks the owner: the console toasts it
            store.request_approval("apr-e2e-1", "refund order 881", now=int(time.time()), expires_in=600)
        # A request with no tool behind it is a question: its toast says so.
        term.wait_for(lambda s: "Question for you" in s and "apr-e2e-1" in s, "the approval toast")
        term.wait_for(lambda s: "1 approval waiting" in s, "the header badge")
        # The pane's row (its countdown and id), not its border's count: the toast covers that border's end.
        # The id has a line of its own under the countdown at 80 columns (it is never cut).
        term.wait_for(lambda s: re.search(r"\d+m\d+s[^\n]*\n[^\n]*apr-e2e-1", s) is not None,
                      "the approval in its pane")
        term.send("y")
        term.wait_for(lambda s: "no question" in s, "the approval to be answered")  # "waiting" may be under a toast
        term.send("\x11")  # ctrl+q
        term.child.expect(pexpect.EOF, timeout=30)
    finally:
        term.child.close(force=True)
    assert term.child.exitstatus == 0, term.text()
    with Store.open(db) as store:
        chats = store.events(source="chat")
        assert [e.payload for e in chats] == [{"text": "hello"}]  # the `a` key stored nothing outside the demo
        resolved = store.resolved_approvals()
        assert [(a.request_id, a.outcome, a.answered_via) for a in resolved] == [("apr-e2e-1", "yes", "console")]
        lease = store.lease()
        assert lease is not None and lease.until < int(time.time())  # released on quit
        assert store.lease_log(1)[0][1] == "release"


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT],
                         ids=["closed-terminal", "kill", "interrupt"])
def test_a_closed_terminal_releases_the_lease_at_once(tmp_path: Path, signum: signal.Signals) -> None:
    db = tmp_path / "inbox.db"
    term = Terminal(db, tmp_path)
    try:
        term.wait_for(lambda s: "Events" in s and "active" in s, "the console to start and take the lease")
        term.child.kill(signum)
        term.child.expect(pexpect.EOF, timeout=30)
    finally:
        term.child.close(force=True)
    assert term.child.signalstatus is None, f"died of signal {term.child.signalstatus}, lease left held"
    with Store.open(db) as store:
        lease = store.lease()
        assert lease is not None and lease.until < int(time.time())  # the next console need not wait a TTL
        assert store.lease_log(1)[0][1] == "release"


HOSTILE_ID = "evil\x1b]0;PWNED\x07\x1b[2J\x9b31m"  # set the title, ring, clear the screen, an 8-bit CSI
HOSTILE_TEXT = "hi\x1b[8m\u202egnp.exe\x7f"


def test_control_characters_from_outside_never_reach_the_terminal(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    with Store.open(db) as store:
        # A signed webhook can carry any id and any text: the console shows them, escaped.
        store.ingest("github", HOSTILE_ID, {"type": "push", "body": {"note": HOSTILE_TEXT}}, now=int(time.time()))
        store.queue_message(f"reply about {HOSTILE_TEXT}", now=int(time.time()))
        store.request_approval("ask-1", f"pay {HOSTILE_TEXT}", now=int(time.time()), expires_in=3600)
    term = Terminal(db, tmp_path)
    try:
        # The source id is past the 80-column table's edge (the "what" column shows the event): the detail shows it.
        term.wait_for(lambda s: "Events" in s and "github" in s and "push" in s and "pay hi" in s,
                      "the event and the approval")
        term.send("\r")  # the detail: the whole source id and the payload
        term.wait_for(lambda s: "Event #1" in s, "the detail screen")
        term.wait_for(lambda s: "PWNED" in s and "gnp.exe" in s, "the id and the payload text, escaped")
        screen = term.text()
        assert "\\x1b]0;PWNED\\x07" in screen and "\\u202egnp.exe" in screen, screen
        term.send("\x1b")
        term.wait_for(lambda s: "Event #1" not in s, "the detail to close")
        term.send("\x11")  # ctrl+q
        term.child.expect(pexpect.EOF, timeout=30)
    finally:
        term.child.close(force=True)
    raw = bytes(term.raw)
    # Textual writes its own escapes (and a BEL ending one), so the sender's are looked for in their context.
    for hostile in ("\x1b]0;PWNED", "PWNED\x07", "\x07\x1b[2J", "\x9b31m", "hi\x1b[8m", "\u202egnp", "exe\x7f"):
        at = raw.find(hostile.encode())
        assert at < 0, f"{hostile!r} reached the terminal: {raw[max(0, at - 80):at + 40]!r}"


def test_slash_finds_an_event_by_its_payload_in_a_real_terminal(tmp_path: Path) -> None:
    db = tmp_path / "inbox.db"
    now = int(time.time())
    with Store.open(db) as store:
        store.ingest_many([("github", f"d-{n}", {"note": f"routine push {n}"}) for n in range(300)], now=now)
        store.ingest("chat", "c-77", {"text": "where is the pelican invoice?"}, now=now)
        store.ingest_many([("github", f"e-{n}", {"note": "more pushes"}) for n in range(300)], now=now)
        store.queue_message("Reminder: the pelican invoice is due Friday", now=now)
    term = Terminal(db, tmp_path)
    try:
        term.wait_for(lambda s: "Events" in s and "active" in s, "the console to start and take the lease")
        term.send("/")
        term.wait_for(lambda s: "every word must match" in s, "the search screen")
        term.send("PELICAN\r")
        term.wait_for(lambda s: "Events: 1 found (all searched)" in s and "c-77" in s, "the event found")
        term.send("\r")  # the event found, in detail
        term.wait_for(lambda s: "Event #301" in s and "pelican invoice" in s, "the event's detail")
        term.send("\x1b")
        term.wait_for(lambda s: "Event #301" not in s and "^o Outbox" in s, "back to the results (their keys)")
        # Each key that moves the focus is waited on: a key typed before the move lands where the focus was.
        term.send("\x1b")
        term.wait_for(lambda s: "every word must match" not in s, "the search closed")
        term.send("/")
        term.wait_for(lambda s: "every word must match" in s and "type to search" in s, "a new search")
        term.send("friday\r")
        term.wait_for(lambda s: "▸ Events: 0 found" in s and "Outbox messages: 1 found" in s, "the message found")
        term.send("\x0f")  # ctrl+o: to the messages found
        term.wait_for(lambda s: "▸ Outbox messages" in s, "the messages focused")
        term.send("\r")
        term.wait_for(lambda s: "Outbox message #1" in s and "due Friday" in s, "the message in full")
        term.send("\x1b")
        term.send("\x1b")
        term.wait_for(lambda s: "every word must match" not in s and "Events" in s, "the main screen again")
        term.send("\x11")  # ctrl+q
        term.child.expect(pexpect.EOF, timeout=30)
    finally:
        term.child.close(force=True)
    assert term.child.exitstatus == 0, term.text()
