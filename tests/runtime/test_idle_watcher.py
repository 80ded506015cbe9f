"""An idle engine does not look at its inbox file over and over: the change feed is told of commits (the
kernel reports writes to the WAL), where the watcher used to read PRAGMA data_version every 50 ms through the
reader thread (20 hand-offs a second, most of an idle console's CPU). A commit by another process still wakes
the engine at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.core import Store
from tests.runtime.test_engine import START, make_settings
from tests.support import read_until, until

ROOT = Path(__file__).resolve().parents[2]
INGEST_ELSEWHERE = """
import sys
sys.path.insert(0, sys.argv[1])
from console.core import Store
with Store.open(sys.argv[2]) as store:
    store.ingest("chat", "from-another-process", {"text": "hi"}, now=int(sys.argv[3]))
"""


async def test_an_idle_engine_rarely_looks_at_the_file_and_a_commit_elsewhere_still_wakes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[int] = []
    original = Store.data_version

    def counted(self: Store) -> int:
        looks.append(1)
        return original(self)

    monkeypatch.setattr(Store, "data_version", counted)
    clock = ManualClock(START)
    # A long idle cap: nothing but the watcher wakes the worker for another process's commit.
    engine = build_engine(make_settings(tmp_path), clock=clock, holder="w", idle_cap=60, install_defaults=False)
    await engine.start()
    try:
        await read_until(engine, lambda s: engine.mode == "active")
        await asyncio.sleep(0.3)  # the start's own commits settle
        looks.clear()
        await asyncio.sleep(2.0)  # a measuring window of idle time, not a wait for a result
        # Looking every 50 ms made 40 looks in these two seconds; half-second waits, each looking at its ends,
        # made up to 10; the watcher now waits 30 s at a time (stopping closes the feed, which ends the wait).
        assert len(looks) <= 2, len(looks)
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", INGEST_ELSEWHERE, str(ROOT), str(tmp_path / "inbox.db"),
                             str(clock.now())], timeout=60)
        assert done.returncode == 0
        # Within 10 s, not the idle cap's 60: the watcher woke the worker.
        await read_until(engine, lambda s: (e := s.find_event("chat", "from-another-process")) and e.status == "done",
                         what="the other process's event run", limit=10)
    finally:
        stopping = asyncio.get_running_loop().time()
        await engine.stop()
        # The watcher's 30 s wait did not hold the stop up (bounded generously for a loaded machine).
        assert asyncio.get_running_loop().time() - stopping < 10


async def test_a_change_feed_opened_while_the_watcher_is_cancelled_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() cancels the watcher while the reader thread is still opening its change feed (a busy reader, a
    loaded machine): the thread does not know, and the feed it opens is closed all the same. It was left open:
    per stop, an inotify watch, an eventfd and a connection on SQLite, a connection on PostgreSQL."""
    opening, go_on = threading.Event(), threading.Event()
    original = Store.change_feed
    opened: list[Any] = []  # kept here: a feed nobody closed stays open (not freed by the garbage collector)

    def slow_open(self: Store) -> Any:
        opening.set()
        go_on.wait(30)
        opened.append(original(self))
        return opened[-1]

    monkeypatch.setattr(Store, "change_feed", slow_open)
    watches_before = inotify_watches()
    # A short grace: the worker's pass waits on the reader thread held here, so its shutdown waits the grace out.
    engine = build_engine(make_settings(tmp_path), clock=ManualClock(START), holder="w", idle_cap=0.1,
                          install_defaults=False, shutdown_grace=0.5)
    await engine.start()
    stopping: asyncio.Task[None] | None = None
    try:
        assert await asyncio.to_thread(opening.wait, 10)
        watcher = next(task for task in asyncio.all_tasks() if task.get_name() == "agent-console-watcher")
        stopping = asyncio.create_task(engine.stop())
        await until(lambda: watcher.cancelling() > 0 or watcher.done(), "stop to cancel the watcher")
    finally:
        go_on.set()
        await (stopping or engine.stop())
    assert len(opened) == 1
    await until(lambda: inotify_watches() == watches_before, "the feed's inotify watch to be closed", limit=5)


def inotify_watches() -> int:
    """This process's open inotify descriptors (a SQLite change feed holds one)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # closed since it was listed
            count += os.readlink(fd) == "anon_inode:inotify"
    return count
