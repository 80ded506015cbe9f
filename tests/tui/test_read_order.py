"""A pane's reads overlap (the console's flush reads it on a worker while a key, a tick or settle() reads it too),
each waiting on the inbox's reader thread. A read that began before another whose answer is already on the screen
must not put its older facts there after it: under load a settled approval's picture showed the approval waiting
again, the header's rate and its "nobody is working" banner from before the answer, after the panes had shown it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started
from tests.tui.test_tool_approvals import asked_by_a_webhook

T = TypeVar("T")
SIZE = (120, 40)
OLDER = contextvars.ContextVar("OLDER", default=False)  # set in the read under test (its worker's own context)


def approvals_show_the_outcome(app: ConsoleApp, rid: str) -> bool:
    view = app.query_one(ApprovalsPane).view
    return view is not None and not view.pending and any(a.request_id == rid for a in view.resolved)


def header_shows_none_waiting(app: ConsoleApp, rid: str) -> bool:
    view = app.query_one(ConsoleHeader).view
    return view is not None and view.facts is not None and view.facts.waiting == 0


def events_show_the_answer(app: ConsoleApp, rid: str) -> bool:
    page = app.query_one(EventsPane).page
    return page is not None and any(e.source == "approval" for e in page.events)


def reload_of(app: ConsoleApp, pane: str) -> Callable[[], Awaitable[None]]:
    widget = {"approvals": ApprovalsPane, "header": ConsoleHeader, "events": EventsPane}[pane]
    return app.query_one(widget).reload  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize(("pane", "shows_the_answer"), [
    ("approvals", approvals_show_the_outcome),
    ("header", header_shows_none_waiting),
    ("events", events_show_the_answer),
])
async def test_a_read_begun_before_one_already_shown_does_not_show_its_older_facts(
        db_path: Path, clock: ManualClock, pane: str, shows_the_answer: Callable[[ConsoleApp, str], bool]) -> None:
    _event_id, rid = asked_by_a_webhook(db_path, clock)
    with reopen(db_path) as store:
        store.acquire("elsewhere", now=clock.now() + 10_000)  # the console stays on standby: nothing runs
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert not shows_the_answer(app, rid)
        gate = asyncio.Event()
        held: list[bool] = []
        real_read = app.read

        async def read(fn: Callable[[Store], T]) -> T:
            answer = await real_read(fn)
            if OLDER.get():  # the older read's answers: read before the answer, handed back after
                held.append(True)
                await gate.wait()
            return answer

        async def older_read() -> None:
            OLDER.set(True)
            await reload()

        app.read = read  # type: ignore[method-assign]
        reload = reload_of(app, pane)
        older = app.run_worker(older_read(), group="test-older-read")
        await pilot_until(pilot, lambda: bool(held), what="the older read done and held")
        with reopen(db_path) as phone:
            assert phone.answer_approval(rid, "no", now=clock.now(), via="ntfy") == "no"
        await reload()  # begun after the answer, shown first
        assert shows_the_answer(app, rid)
        gate.set()
        await older.wait()
        assert shows_the_answer(app, rid), "the older read put what it had read before the answer on the screen"
