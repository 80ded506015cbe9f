"""Snapshots of the console round's screens at 80x24 and 120x40 (fixed clock, fixed holder): the keys screen,
the approval screen waiting, answered elsewhere and expired, and the header with a tool server down."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.tui.screens.keys import KeysScreen
from tests.support import pilot_until
from tests.tui.scenes import make_app
from tests.tui.test_snapshots import ready

Compare = Callable[..., bool]
SIZES = [(80, 24), (120, 40)]
IDS = ["80x24", "120x40"]


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_keys_screen(snap_compare: Compare, filled: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    app = make_app(filled, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app, "f1", screen=KeysScreen)(pilot)
        screen = app.screen
        assert isinstance(screen, KeysScreen)
        await pilot_until(pilot, lambda: bool(screen.shown), what="the keys")
        await pilot.press("down", "down")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
