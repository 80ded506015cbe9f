"""Snapshots of the find, read and dead-event screens at 80x24 and 120x40 (fixed clock, fixed holder)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.tui.app import ConsoleApp
from console.tui.screens.filter_picker import FilterScreen
from console.tui.screens.message import MessageScreen
from console.tui.screens.search import SearchScreen
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app
from tests.tui.test_snapshots import ready

Compare = Callable[..., bool]
SIZES = [(80, 24), (120, 40)]
DIGEST = ("Digest for today:\n- 3 pull requests merged into me/app\n- a refund of $42.00 for order 881, approved "
          "by you at 14:02\n- the staging table was kept (you said no)\n\nNothing else needs you.")


def searched(app: ConsoleApp, text: str) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app, "slash", screen=SearchScreen)(pilot)
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await pilot.press(*text, "enter")
        await pilot_until(pilot, lambda: screen.events_table.row_count > 0 and screen.text == text, what="results")
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_search_screen(snap_compare: Compare, filled: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=size, run_before=searched(app, "chat"))


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_message_screen(snap_compare: Compare, filled: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    with reopen(filled) as store:
        store.queue_message(DIGEST, now=clock.now() - 5)
    app = make_app(filled, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app, "o", screen=SearchScreen)(pilot)
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await pilot_until(pilot, lambda: screen.outbox_table.row_count > 0, what="the outbox")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, MessageScreen), what="the message")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_filter_list(snap_compare: Compare, filled: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=size, run_before=ready(app, "F", screen=FilterScreen))


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
def test_dead_event_marked_with_its_error(snap_compare: Compare, filled: Path, clock: ManualClock,
                                          size: tuple[int, int]) -> None:
    app = make_app(filled, clock)
    # the pending event marked, then the dead one selected: its reason and when it died under the table
    assert snap_compare(app, terminal_size=size, run_before=ready(app, "space", "down", "down", "down"))
