"""Snapshot tests: fixed clock, fixed holder, no blinking cursor, a file name instead of a temp path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.tui.app import ConsoleApp
from console.tui.screens.approval import ApprovalScreen
from console.tui.screens.detail import DetailScreen
from console.tui.screens.inject import InjectScreen
from console.tui.theme_files import SHIPPED
from console.tui.widgets.approvals_pane import ApprovalsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen, wait_until
from tests.tui.scenes import make_app
from tests.tui.test_tool_approvals import asked_by_a_webhook, asked_to_pay, grown

Compare = Callable[..., bool]


async def quiet(app: ConsoleApp, pilot: Pilot[Any]) -> None:
    """No pane marked for a read nor being read: what the screen shows is what the file holds."""
    await wait_until(pilot, lambda: not app._dirty and not app._busy and not app._flush_due, what="quiet panes")


def ready(app: ConsoleApp, *keys: str, screen: type | None = None) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot_until(pilot, lambda: app.started and app.query_one("#events").page is not None,  # type: ignore[attr-defined]
                         what="first page")
        await wait_until(pilot, lambda: app.engine.mode != "starting", what="the engine's first pass")
        await quiet(app, pilot)
        await app.settle()
        if keys:
            await pilot.press(*keys)
        if screen is not None:
            await pilot_until(pilot, lambda: isinstance(app.screen, screen), what=screen.__name__)
        await quiet(app, pilot)
        await pilot.pause()
        await pilot.pause()  # a table given new rows sizes its columns on the refresh after

    return run_before


def test_main_screen(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready(app))


def test_main_screen_wide(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(140, 36), run_before=ready(app))


def test_detail_screen(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready(app, "enter", screen=DetailScreen))


def test_detail_screen_tall(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    """A dead event at 120x40: why it died from its fields, its history, its steps spaced and timed."""
    with reopen(filled) as store:
        store.run_once("poison-1:look", lambda: {"ok": True}, gen=2, now=clock.now() - 4, event_id=3)
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(120, 40),
                        run_before=ready(app, "down", "down", "down", "down", "enter", screen=DetailScreen))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_approval_screen(snap_compare: Compare, db_path: Path, clock: ManualClock, size: tuple[int, int]) -> None:
    """A Claude run's approval: the request id and the event that asked, the tool and its arguments, the sources."""
    asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        app.query_one(ApprovalsPane).table.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_the_approvals_pane_with_a_long_call(snap_compare: Compare, db_path: Path, clock: ManualClock,
                                             size: tuple[int, int]) -> None:
    """pay(amount, memo of 170 characters, to_account): every argument named, the memo cut in its middle,
    the untrusted origin, the pane grown while it waits, q Quit in the footer."""
    asked_to_pay(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        await wait_until(pilot, lambda: grown(app) and app.query_one(ApprovalsPane).laid_out, what="the grown pane")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_the_approval_screen_with_a_long_call(snap_compare: Compare, db_path: Path, clock: ManualClock,
                                              size: tuple[int, int]) -> None:
    """The same call opened: every value whole, one argument a line, where the request came from."""
    asked_to_pay(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        app.query_one(ApprovalsPane).table.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_detail_of_a_claude_run_with_its_approval(snap_compare: Compare, db_path: Path, clock: ManualClock) -> None:
    asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)
    assert snap_compare(app, terminal_size=(120, 40), run_before=ready(app, "enter", screen=DetailScreen))


def test_inject_modal(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready(app, "i", screen=InjectScreen))


@pytest.mark.parametrize("theme", SHIPPED)
def test_each_shipped_theme(snap_compare: Compare, filled: Path, clock: ManualClock, theme: str) -> None:
    app = make_app(filled, clock, settings={"theme": theme})
    assert app.theme == theme
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready(app))


def test_main_screen_120x40(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(120, 40), run_before=ready(app))


def nobody_working(app: ConsoleApp, clock: ManualClock) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """This console stalled, then the other holder's lease lapsed: the banner, and x reads Resume."""
    first = ready(app, "x")

    async def run_before(pilot: Pilot[Any]) -> None:
        await first(pilot)
        await wait_until(pilot, lambda: app.engine.mode == "stalled", what="stalled")
        clock.advance(200)
        await app.settle()
        await pilot.pause()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_nobody_working_banner(snap_compare: Compare, filled: Path, clock: ManualClock,
                               size: tuple[int, int]) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=size, run_before=nobody_working(app, clock))


def test_main_screen_60x15_has_no_stray_characters(snap_compare: Compare, filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    assert snap_compare(app, terminal_size=(60, 15), run_before=ready(app))
