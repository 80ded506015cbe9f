"""The SQLite change feed is told of writes to the WAL (inotify) instead of looking every 50 ms: an idle wait
looks at the file only at its ends, a commit by another process wakes it at once, and it keeps working when the
WAL is truncated, when inotify is missing, and when it is closed from another thread."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import inotify_simple
import pytest

from console.core import Store
from console.core.store import ChangeFeed
from console.core.walfeed import WalFeed

T = 1_000_000
ROOT = Path(__file__).resolve().parents[2]
COMMIT_ELSEWHERE = """
import sys
sys.path.insert(0, sys.argv[1])
from console.core import Store
with Store.open(sys.argv[2]) as store:
    store.ingest("chat", "from-another-process", {"text": "hi"}, now=1_000_000)
"""


class CountedLooks:
    """A Store whose data_version calls are counted: how often the feed looks at the file."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = store.path
        self.looks = 0

    def data_version(self) -> int:
        self.looks += 1
        return self.store.data_version()

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    path = tmp_path / "inbox.db"
    Store.open(path).close()
    return path


def test_an_idle_wait_looks_at_the_file_only_at_its_ends(inbox: Path) -> None:
    counted = CountedLooks(Store.open(inbox))
    feed = WalFeed(counted)
    try:
        assert feed.kernel_told  # this machine is Linux: the kernel reports writes
        counted.looks = 0
        started = time.monotonic()
        assert feed.wait(0.6) is False
        assert time.monotonic() - started >= 0.6
        # Looking every 50 ms, as the feed did before, made 13 looks in this wait.
        assert counted.looks <= 2
    finally:
        feed.close()


def test_a_commit_by_another_process_wakes_the_feed_at_once(inbox: Path) -> None:
    feed = Store.open(inbox).change_feed()
    try:
        woke: list[tuple[bool, float]] = []
        waiter = threading.Thread(target=lambda: woke.append((feed.wait(30), time.monotonic())))
        waiter.start()
        subprocess.run([sys.executable, "-c", COMMIT_ELSEWHERE, str(ROOT), str(inbox)], check=True, timeout=60)
        ended = time.monotonic()
        waiter.join(30)
        assert woke and woke[0][0] is True
        # Woken by the write, not by the end of its 30 s wait (bounded generously for a loaded machine).
        assert woke[0][1] - ended < 5
        assert feed.wait(0.2) is False  # one commit wakes once
    finally:
        feed.close()


def woken(feed: WalFeed | ChangeFeed) -> bool:
    """Whether the feed wakes well before the end of its wait (a wait that ran out ends with a look, which would
    see a commit the kernel never reported: a 30 s wait tells the two apart)."""
    started = time.monotonic()
    return feed.wait(30) and time.monotonic() - started < 10


def test_a_truncated_wal_still_reports_the_next_commit(inbox: Path) -> None:
    with Store.open(inbox) as other:
        feed = Store.open(inbox).change_feed()
        try:
            other.ingest("chat", "m-1", {}, now=T)
            assert woken(feed)
            assert other.shrink_wal()  # the checkpoint truncates the WAL to nothing (the same file)
            feed.wait(0.3)  # the WAL starting over changes data_version, as a commit does: a wake-up to spare
            other.ingest("chat", "m-2", {}, now=T)
            assert woken(feed)
        finally:
            feed.close()


def test_without_inotify_the_feed_looks_every_50_ms(inbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_inotify() -> None:
        raise AttributeError("inotify_init1")  # what the library raises where libc has no inotify

    monkeypatch.setattr(inotify_simple, "INotify", no_inotify)
    feed = Store.open(inbox).change_feed()
    try:
        assert isinstance(feed, WalFeed) and not feed.kernel_told
        with Store.open(inbox) as other:
            other.ingest("chat", "m-1", {}, now=T)
        assert feed.wait(10) is True
        assert feed.wait(0.2) is False
    finally:
        feed.close()


def test_closing_the_feed_from_another_thread_ends_a_long_wait_at_once_without_an_error(inbox: Path) -> None:
    feed = Store.open(inbox).change_feed()
    assert isinstance(feed, WalFeed) and feed.kernel_told
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(feed.wait(feed.longest_wait))
        except Exception as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)  # let the waiter block in poll(): the close below must reach a wait already under way
    closed = time.monotonic()
    feed.close()
    waiter.join(feed.longest_wait)
    # Ended by the close, not by its 30 s running out (bounded generously for a loaded machine).
    assert not waiter.is_alive() and outcome == [False]
    assert time.monotonic() - closed < 5
    assert feed.wait(1) is False  # a closed feed waits no more


def test_closing_the_feed_before_a_wait_leaves_nothing_open(inbox: Path) -> None:
    counted = CountedLooks(Store.open(inbox))
    feed = WalFeed(counted)
    feed.close()
    started = time.monotonic()
    assert feed.wait(feed.longest_wait) is False
    assert time.monotonic() - started < 1
