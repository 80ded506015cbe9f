"""Issue 36, item 4: a toast over a modal screen never covers its question or its keys line, at 80x24 either:
over a modal the toasts keep to the screen's top two rows, above the dialog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Footer
from textual.widgets._toast import Toast

from console.clock import ManualClock
from console.tui.app import ConsoleApp
from console.tui.screens.approval import ApprovalScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from tests.support import pilot_until
from tests.tui.scenes import make_app, started
from tests.tui.test_snapshots import ready
from tests.tui.test_tool_approvals import asked_by_a_webhook

Compare = Callable[..., bool]
SIZES = [(80, 24), (120, 40)]
IDS = ["80x24", "120x40"]


async def open_approval(app: ConsoleApp, pilot: Pilot[Any]) -> ApprovalScreen:
    app.query_one(ApprovalsPane).table.focus()
    await pilot.press("enter")
    await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
    screen = app.screen
    assert isinstance(screen, ApprovalScreen)
    return screen


def three_toasts(app: ConsoleApp) -> None:
    app.toast("Another approval waits: apr-2 refund(order=\"882\") asked by a run of github delivery-8",
              title="Approval needed", severity="warning", timeout=30)
    app.toast("the bot token was refused (401 Unauthorized): revoked or wrong; set a new one and restart",
              title="Telegram paused", severity="error", timeout=30)
    app.toast("shop: SHOP_TOKEN not set — retrying; its tools are unavailable", title="Tool server down",
              severity="error", timeout=30)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_toasts_leave_the_question_and_the_keys_line_uncovered(db_path: Path, clock: ManualClock,
                                                                     size: tuple[int, int]) -> None:
    asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=size, notifications=True) as pilot:
        await started(app, pilot)
        screen = await open_approval(app, pilot)
        three_toasts(app)
        await pilot_until(pilot, lambda: any(toast.region.height for toast in screen.query(Toast)),
                          what="a toast over the dialog")
        await pilot.pause()
        question = screen.query_one("#approval-call-heading").region
        dialog = screen.query_one("#approval-dialog").region  # its bottom border carries "y yes · n no"
        lines = {"the question": question, "the keys line": screen.query_one(Footer).region,
                 "the dialog's keys": Region(dialog.x, dialog.bottom - 1, dialog.width, 1)}
        width, height = size
        toast_cells = {(x, y) for y in range(height) for x in range(width) if on_a_toast(screen, x, y)}
        assert toast_cells and max(y for _, y in toast_cells) <= 1  # a toast shows, in the top two rows only
        for what, line in lines.items():
            assert line.height and not any((x, y) in toast_cells for x in range(line.x, line.right)
                                           for y in range(line.y, line.bottom)), f"a toast covers {what}"


def on_a_toast(screen: Any, x: int, y: int) -> bool:
    """Whether what is drawn at (x, y) is a toast's."""
    widget, _ = screen.get_widget_at(x, y)
    return any(isinstance(node, Toast) for node in (widget, *widget.ancestors))


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_toasts_over_the_approval_screen_snapshot(snap_compare: Compare, db_path: Path, clock: ManualClock,
                                                  size: tuple[int, int]) -> None:
    asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        screen = await open_approval(app, pilot)
        three_toasts(app)
        await pilot_until(pilot, lambda: any(toast.region.height for toast in screen.query(Toast)),
                          what="a toast over the dialog")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
