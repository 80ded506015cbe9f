"""Quitting while the events pane reads: the console's exit never waits on a read nobody answers.

The console stops its engine first (the lease released), then closes its screens. A pane that reads as the engine
stops (here: the terminal resized, the events pane reading a taller page in its own message handler) used to send
its read to the reader thread after that thread was told to end: the read was never answered, the pane never
took its close, and the console hung as it quit (the 1,000,000-event bench child, now and then, at its end).
Bounded: a console that does not quit fails the test; the pane's stuck pump is then cancelled so the test ends.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from console.clock import ManualClock
from console.core import Store
from console.tui.widgets.events_pane import EventsPane
from tests.support import LIMIT, until
from tests.tui.scenes import make_app, shown_ids, started

BOUND = 20.0  # seconds for the whole test; a console that quits does so in well under one


async def test_the_console_quits_when_the_events_pane_reads_as_the_engine_stops(filled: Path,
                                                                                 clock: ManualClock) -> None:
    app = make_app(filled, clock)
    panes: list[EventsPane] = []
    go_on = threading.Event()
    shown: dict[str, int] = {}

    async def quit_while_the_pane_reads() -> None:
        async with app.run_test(size=(80, 14)) as pilot:
            await started(app, pilot)
            panes.append(app.query_one(EventsPane))
            shown["before"] = len(shown_ids(app))
            assert next(iter(app.engine._threads)) == "reader"  # the first frame's reads came first: closed first
            busy = threading.Event()

            def held_up(store: Store) -> None:
                busy.set()
                go_on.wait(LIMIT)

            # Held up on its last thread, the engine's stop stays between the reader's close and its end
            held = asyncio.create_task(app.engine.on("maintenance", held_up))
            await until(busy.is_set, "the maintenance thread held up")
            stopping = asyncio.create_task(app.shutdown_engine())
            try:
                await until(lambda: not app.engine._tasks, "the engine closing its threads", interval=0)
                await pilot.resize_terminal(80, 24)  # the events pane reads a taller page, in its own handler
                await until(lambda: len(shown_ids(app)) > shown["before"], "the taller page", limit=BOUND)
            finally:
                go_on.set()
            await stopping
            await held
        # the context's end is the console quitting: its screens closed, every pane's pump ended

    quitting = asyncio.create_task(quit_while_the_pane_reads())
    done, _ = await asyncio.wait({quitting}, timeout=BOUND)
    if not done:
        go_on.set()
        if panes and panes[0]._task is not None:
            panes[0]._task.cancel()  # the pane's pump waits on a read nobody answers: end it, so the test ends
        await asyncio.wait({quitting}, timeout=BOUND)
        pytest.fail(f"the console did not quit within {BOUND:g} s")
    quitting.result()
    assert shown["before"] < 7
