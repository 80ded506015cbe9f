"""The event detail refreshes live and acts (issue 13, console item 2), and a yes can ask once more (item 1):
pilot tests for each key, checking the screen and the inbox file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from console.clock import ManualClock
from console.notices import Notice
from console.tui.app import ConsoleApp, EngineNotice
from console.tui.screens.approval import ApprovalScreen
from console.tui.screens.confirm import ConfirmScreen
from console.tui.screens.detail import DetailScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.events_pane import EventsPane
from tests.tui.conftest import reopen, wait_until
from tests.tui.scenes import OTHER, make_app
from tests.tui.test_tool_approvals import asked_by_a_webhook

SIZE = (120, 40)


def shown(app: ConsoleApp, selector: str) -> str:
    return str(app.screen.query_one(selector).render()).replace("\u00a0", " ")


def toasts(app: ConsoleApp) -> list[str]:
    return [n.message for n in app._notifications]


async def open_detail(app: ConsoleApp, pilot: object, *downs: str) -> DetailScreen:
    pane = app.query_one(EventsPane)
    await wait_until(pilot, lambda: app.started and pane.page is not None and bool(pane.page.events),  # type: ignore[arg-type]
                     what="the events")
    await app.settle()
    for key in downs:
        await pilot.press(key)  # type: ignore[attr-defined]
    await pilot.press("enter")  # type: ignore[attr-defined]
    await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail")  # type: ignore[arg-type]
    assert isinstance(app.screen, DetailScreen)
    return app.screen


async def test_the_detail_follows_the_event_while_it_is_open(filled: Path, clock: ManualClock) -> None:
    """Another worker runs the open event: its status, attempts, history and reply show up without a key."""
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(app, pilot)
        assert screen.view.event_id == 7 and "pending" in shown(app, "#detail-title")
        assert "held by another worker, worker-b:4242" in shown(app, "#detail-why")
        with reopen(filled) as store:  # worker-b, in another connection, claims and finishes it
            [claimed] = store.claim_batch(OTHER, 2, now=clock.now())
            assert claimed.id == 7
            assert store.finish(OTHER, 2, [7], now=clock.now(), messages=["Nothing on today."])
        await wait_until(pilot, lambda: "done" in shown(app, "#detail-title"), what="done shown")
        assert "1 attempt " in shown(app, "#detail-title") + " "
        assert "finish" in shown(app, "#detail-history") and "worker-b:4242 gen 2" in shown(app, "#detail-history")
        await wait_until(pilot, lambda: app.screen.query_one("#detail-replies").display
                         and "Nothing on today." in shown(app, "#detail-replies"), what="the reply")
        assert "1 reply held in the outbox by the send gap" in shown(app, "#detail-why")
        assert isinstance(app.screen, DetailScreen)  # still open, never reopened


async def test_r_in_the_detail_retries_the_dead_event_and_shows_it_pending(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(app, pilot, "down", "down", "down", "down")  # event 3: dead
        assert "dead: failed 2 attempts; last error: PoisonEventError" in shown(app, "#detail-why")
        await pilot.press("r")
        await wait_until(pilot, lambda: "pending" in shown(app, "#detail-title"), what="pending again")
        assert "retry" in shown(app, "#detail-history")
        await pilot.press("r")  # no longer dead: refused with a reason
        await wait_until(pilot, lambda: any("only dead events (or discarded ones) are retried" in t
                                            for t in toasts(app)), what="refusal")
    with reopen(filled) as store:
        event = store.event(3)
        assert event is not None and (event.status, event.dead_reason) == ("pending", None)


@pytest.mark.parametrize("answer", ["yes", "no"])
async def test_y_and_n_in_the_detail_answer_the_approval_a_claude_run_asked_for(
    db_path: Path, clock: ManualClock, answer: str
) -> None:
    """The approval carries its event's id: it shows on the event (the detail once guessed from text and never
    found a Claude approval), and y / n there answer it."""
    event_id, rid = asked_by_a_webhook(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(app, pilot)
        assert f"waiting for approval '{rid}'" in shown(app, "#detail-why")
        assert "waiting · expires" in shown(app, "#detail-approvals")
        await pilot.press(answer[0])
        await wait_until(pilot, lambda: f"{answer} in the console" in shown(app, "#detail-approvals"),
                         what="the answer on the detail")
        assert "waiting for approval" not in shown(app, "#detail-why")
        await pilot.press(answer[0])  # nothing is waiting any more
        await wait_until(pilot, lambda: any(f"No approval of #{event_id} is waiting" in t for t in toasts(app)),
                         what="nothing to answer")
    with reopen(db_path) as store:
        approval = store.approval(rid)
        assert approval is not None and (approval.outcome, approval.answered_via) == (answer, "console")


async def test_c_copies_the_payload_and_brackets_step_through_the_events(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(app, pilot)
        await pilot.press("c")
        await wait_until(pilot, lambda: app.clipboard != "", what="the clipboard")
        assert json.loads(app.clipboard) == {"text": "what's on today?"}
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: screen.view.event_id == 6, what="the next (older) event")
        assert "webhook / stripe-evt-1" in shown(app, "#detail-title")
        assert '"amount": 4200' in shown(app, "#detail-payload")
        await pilot.press("c")
        await wait_until(pilot, lambda: '"amount": 4200' in app.clipboard, what="the second payload copied")
        await pilot.press("left_square_bracket", "left_square_bracket")
        await wait_until(pilot, lambda: any("newest event shown" in t for t in toasts(app)), what="the top")
        assert screen.view.event_id == 7 and "chat / c-3" in shown(app, "#detail-title")


async def test_the_brackets_keep_to_the_events_tables_filter(filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=SIZE) as pilot:
        await app.query_one(EventsPane).set_source_filter("chat")
        screen = await open_detail(app, pilot)
        assert screen.view.event_id == 7
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: screen.view.event_id == 5, what="the older chat event, past the webhook")
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: screen.view.event_id == 2, what="the oldest chat event")
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: any("oldest event shown" in t for t in toasts(app)), what="the end")
        assert screen.view.event_id == 2


async def test_with_confirm_approvals_a_yes_with_time_left_asks_once_more(db_path: Path, clock: ManualClock) -> None:
    now = clock.now()
    with reopen(db_path) as store:
        store.request_approval("apr-long", "refund order 881", now=now, expires_in=600)
        store.request_approval("apr-short", "deploy web", now=now, expires_in=45)
        store.request_approval("apr-no", "drop the table", now=now, expires_in=900)
    app = make_app(db_path, clock, settings={"confirm_approvals": True})
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ApprovalsPane)
        await wait_until(pilot, lambda: app.started and pane.table.row_count == 3, what="three approvals")
        pane.table.focus()
        await pilot.press("y")  # the soonest first: 45 s left, no time to ask twice
        await wait_until(pilot, lambda: pane.table.row_count == 2, what="answered at once")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")  # ten minutes left: asked once more; cancelled
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the second question")
        assert "Approve refund order 881 (apr-long)? It has 10m00s left to answer." in shown(
            app, "#confirm-question")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="cancelled")
        with reopen(db_path) as store:
            long = store.approval("apr-long")
            assert long is not None and long.outcome is None
        await pilot.press("enter")  # from its own screen: the same question, confirmed this time
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        assert "Request: apr-long" in shown(app, "#approval-title")
        await pilot.press("y")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="asked once more")
        await pilot.press("y")
        await wait_until(pilot, lambda: pane.table.row_count == 1, what="answered after the confirmation")
        await pilot.press("n")  # a no never asks twice
        await wait_until(pilot, lambda: pane.table.row_count == 0, what="declined at once")
    with reopen(db_path) as store:
        outcomes = {rid: store.approval(rid).outcome for rid in ("apr-long", "apr-short", "apr-no")}  # type: ignore[union-attr]
    assert outcomes == {"apr-long": "yes", "apr-short": "yes", "apr-no": "no"}


async def test_without_the_setting_a_yes_is_answered_at_once(db_path: Path, clock: ManualClock) -> None:
    with reopen(db_path) as store:
        store.request_approval("apr-long", "refund order 881", now=clock.now(), expires_in=3600)
    app = make_app(db_path, clock)
    assert app.settings.confirm_approvals is False
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ApprovalsPane)
        await wait_until(pilot, lambda: app.started and pane.table.row_count == 1, what="the approval")
        pane.table.focus()
        await pilot.press("y")
        await wait_until(pilot, lambda: pane.table.row_count == 0, what="answered")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_a_flood_of_refreshes_folds_into_one_more_read(filled: Path, clock: ManualClock) -> None:
    """A worker draining a backlog sends a notice per run: each asks the open detail to read again. Reads do
    not pile up or cancel each other (a cancelled read would never show anything): one more read follows."""
    from textual.app import App

    from console.tui.detail import DetailView, read_detail
    from console.tui.screens.detail import DetailHost

    store = reopen(filled)
    gate = asyncio.Event()
    loads: list[int] = []

    async def load(event_id: int) -> DetailView:
        loads.append(event_id)
        await gate.wait()
        return read_detail(event_id, now=clock.now(), holder="me", mode="active")(store)

    async def nothing(*_: object) -> None:
        return None

    first = read_detail(7, now=clock.now(), holder="me", mode="active")(store)
    screen = DetailScreen(first, DetailHost(load, nothing, nothing, nothing))  # type: ignore[arg-type]
    app: App[None] = App()
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.push_screen(screen)
            await wait_until(pilot, lambda: len(loads) == 1, what="the first timed read")  # type: ignore[arg-type]
            for _ in range(100):
                screen.refresh_view()
            screen.refresh_view(6)  # and a step to another event, during the flood
            gate.set()
            await wait_until(pilot, lambda: screen.view.event_id == 6, what="the last asked-for event")  # type: ignore[arg-type]
            assert loads[:2] == [7, 6]  # 101 asks, two reads (a timed tick may have started a third since)
            assert set(loads[2:]) <= {6} and len(loads) <= 3
    finally:
        store.close()


def test_a_notice_arriving_after_the_screens_are_gone_touches_no_screen(db_path: Path, clock: ManualClock) -> None:
    """The engine stops after the app's screens have gone: a notice it sent meanwhile still arrives. It marks the
    panes to re-read and looks for an open detail only while there is a screen at all."""
    app = make_app(db_path, clock)
    assert not app.screen_stack
    app._on_notice(EngineNotice(Notice("events")))
    assert "events" in app._dirty
