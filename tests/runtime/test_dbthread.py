"""A database thread and the engine's threads as the engine stops: every call is answered, none waits forever.

Each wait is bounded (asyncio.wait_for): a call left unanswered fails the test instead of hanging it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.core import Store
from console.runtime.dbthread import DbThread
from tests.runtime.test_engine import START, make_settings
from tests.support import until

BOUND = 10.0  # seconds: a call is answered at once or never; this only keeps a broken one from hanging the suite


async def test_a_closed_thread_refuses_work_at_once_instead_of_never_answering(tmp_path: Path) -> None:
    thread = DbThread("reader", lambda: Store.open(tmp_path / "inbox.db"))
    assert (await asyncio.wait_for(thread(lambda store: store.counts()), BOUND))["pending"] == 0
    await asyncio.wait_for(thread.close(), BOUND)
    with pytest.raises(RuntimeError, match="reader database thread is closed"):
        await asyncio.wait_for(thread(lambda store: store.counts()), BOUND)
    await asyncio.wait_for(thread.close(), BOUND)  # closing again is a no-op


async def test_a_read_made_while_the_engine_stops_is_answered(tmp_path: Path) -> None:
    """The console quitting: the engine stops, and a pane asks for a read meanwhile (the terminal resized, the
    events pane reading its page again). That read used to queue behind the reader thread's end, never be
    answered, and hold the pane, and so the console's exit, for ever."""
    engine = build_engine(make_settings(tmp_path), clock=ManualClock(START), holder="test-worker", idle_cap=0.1,
                          install_defaults=False)
    # The reader first (as in the console, whose first frame reads before the engine starts): the stop closes it
    # first, in the same step as it lets go of its services' tasks, so the read below comes after its close.
    engine._thread("reader")
    await engine.start()
    assert (await engine.read(lambda store: store.counts()))["pending"] == 0
    stopping = asyncio.create_task(engine.stop())
    await until(lambda: not engine._tasks, "the engine closing its threads", interval=0)
    late = asyncio.create_task(engine.read(lambda store: store.counts()))
    assert (await asyncio.wait_for(late, BOUND))["pending"] == 0
    await asyncio.wait_for(stopping, BOUND)
    assert engine.mode == "stopped"
