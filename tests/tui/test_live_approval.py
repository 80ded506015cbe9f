"""The approval screen is live: its countdown ticks, an answer from elsewhere or the deadline shows as the
outcome with y / n gone, and the "Approval needed" toast goes once its approval is settled."""

from __future__ import annotations

import asyncio
from pathlib import Path

from console.clock import ManualClock
from console.core import Approval
from console.tui.screens.approval import ApprovalScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started, text_of
from tests.tui.test_tool_approvals import asked_by_a_webhook

SIZE = (80, 24)


def answer_keys(screen: ApprovalScreen) -> set[str]:
    return {b.key for _n, b, enabled, _t in screen.active_bindings.values() if b.show and enabled}


async def open_it(app: object, pilot: object) -> ApprovalScreen:
    app.query_one(ApprovalsPane).table.focus()  # type: ignore[attr-defined]
    await pilot.press("enter")  # type: ignore[attr-defined]
    await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")  # type: ignore[arg-type, attr-defined]
    screen = app.screen  # type: ignore[attr-defined]
    assert isinstance(screen, ApprovalScreen)
    return screen


async def test_it_ticks_and_shows_an_answer_from_a_phone_with_y_and_n_gone(db_path: Path,
                                                                           clock: ManualClock) -> None:
    _event_id, rid = asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_it(app, pilot)
        await pilot_until(pilot, lambda: "waiting · expires" in text_of(app, "#approval-deadline"), what="waiting")
        assert "(in 8m20s)" in text_of(app, "#approval-deadline")
        assert {"y", "n"} <= answer_keys(screen)
        clock.advance(10)
        await screen.tick()
        assert "(in 8m10s)" in text_of(app, "#approval-deadline")  # it ticks
        with reopen(db_path) as phone:
            assert phone.answer_approval(rid, "yes", now=clock.now(), via="ntfy") == "yes"
        await screen.tick()  # the read goes on beside the tick
        await pilot_until(pilot, lambda: text_of(app, "#approval-deadline").startswith("answered yes from ntfy "),
                          what="the answer from the phone")
        assert not {"y", "n"} & answer_keys(screen)
        await pilot.press("n")  # too late to answer: the key does nothing here
        await pilot.pause()
        assert app.screen is screen
        assert str(screen.query_one("#approval-dialog").border_subtitle) == "esc close"


async def test_it_shows_the_deadline_passing_as_expired(db_path: Path, clock: ManualClock) -> None:
    asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_it(app, pilot)
        clock.advance(501)  # past its deadline, before any expiry is written
        await screen.tick()
        assert text_of(app, "#approval-deadline").startswith("expired ")
        assert not {"y", "n"} & answer_keys(screen)


async def test_the_approval_needed_toast_goes_once_answered_elsewhere(db_path: Path, clock: ManualClock) -> None:
    with reopen(db_path) as store:
        store.acquire("elsewhere", now=clock.now() + 10_000)  # standby: nothing here runs
        store.ingest("chat", "c-1", {"text": "hi"}, now=clock.now())
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        with reopen(db_path) as store:
            store.request_approval("apr-1-x", "refund order 881", now=clock.now(), expires_in=300)
        toasts = app.query_one(ApprovalsPane).toasts
        # the pane keeps the toast as it posts it; the app shows it once it has handled that message
        await pilot_until(pilot, lambda: "apr-1-x" in toasts and toasts["apr-1-x"] in app._notifications,
                          what="the toast")
        toast = toasts["apr-1-x"]
        with reopen(db_path) as store:
            store.answer_approval("apr-1-x", "no", now=clock.now(), via="telegram")
        await pilot_until(pilot, lambda: toast not in app._notifications, what="the toast gone")


async def test_the_countdown_ticks_each_second_while_one_read_is_held_for_several(db_path: Path,
                                                                                   clock: ManualClock) -> None:
    """The screen's own clock, not a tick called by the test: one read of the approval held for seconds (a busy
    reader) held every tick after it too (the interval awaits its callback), so the countdown stood still until the
    read came back. Each second now draws the countdown, whatever the read under way."""
    asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        screen = await open_it(app, pilot)
        await pilot_until(pilot, lambda: "(in 8m20s)" in text_of(app, "#approval-deadline"), what="waiting")
        reader_free = asyncio.Event()
        read, reads = screen.reread, []
        assert read is not None

        async def busy_reader() -> Approval | None:
            reads.append(clock.now())
            await reader_free.wait()
            return await read()

        screen.reread = busy_reader
        for left in ("8m19s", "8m18s", "8m17s"):
            clock.advance(1)
            await pilot_until(pilot, lambda left=left: f"(in {left})" in text_of(app, "#approval-deadline"),
                              what=f"the countdown at {left} while the first read is held")
        assert len(reads) == 1  # one read at a time: the held one, not one piled up each second
        reader_free.set()
        with reopen(db_path) as store:
            store.answer_approval(screen.view.approval.request_id, "no", now=clock.now(), via="telegram")
        await pilot_until(pilot, lambda: screen.view.approval.outcome == "no", what="read again once free")
