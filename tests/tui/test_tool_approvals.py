"""The console and tools (issue 9): an approval shows the call it is bound to and where its run came from;
enter opens it with the full arguments and the conversation so far, and y there answers it; an event's detail
shows the run's transcript with each tool call's decision."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets._footer import FooterKey

from console.clock import ManualClock
from console.core import ApprovalDraft, ToolCallRecord
from console.tui.app import ConsoleApp
from console.tui.screens.approval import ApprovalScreen
from console.tui.screens.detail import DetailScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from console.tui.widgets.events_pane import EventsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app

SIZE = (120, 40)
HOLDER = "worker-x:1"


def asked_by_a_webhook(db: Path, clock: ManualClock) -> tuple[int, str]:
    """A finished run of a GitHub event whose model looked an order up (allowed) and asked to refund it."""
    now = clock.now()
    with reopen(db) as store:
        store.ingest("github", "delivery-7", {"action": "opened"}, now=now - 100)
        gen = store.acquire(HOLDER, now=now - 100)
        assert gen is not None
        (event,) = store.claim_batch(HOLDER, gen, now=now - 100)
        turn = {"id": "msg_1", "model": "m", "stop_reason": "tool_use", "usage": {}, "content": [
            {"type": "text", "text": "The PR mentions order 881; let me check it."},
            {"type": "tool_use", "id": "t1", "name": "mcp__shop__lookup_order", "input": {"order": "881"}},
            {"type": "tool_use", "id": "t2", "name": "mcp__shop__refund", "input": {"order": "881", "amount": 12.5}},
        ]}
        store.run_once(f"claude:{event.id}:turn:1", lambda: turn, gen=gen, now=now - 100, event_id=event.id)
        session = {"state": {"messages": [
            {"role": "user", "content": "1 new event(s) in your inbox: the PR body"},
            {"role": "assistant", "content": turn["content"]}]}}
        rid = "apr-1-abcdef12"
        assert store.finish(HOLDER, gen, [event.id], now=now - 100, approvals=[ApprovalDraft(
            rid, 'mcp__shop__refund(amount=12.5, order="881")', 600, {"untrusted": ["github"]}, session, event.id,
            "mcp__shop__refund", {"amount": 12.5, "order": "881"},
            [{"event_id": event.id, "source": "github", "source_id": "delivery-7"}])],
            tool_calls=[
                ToolCallRecord(event.id, "t1", "mcp__shop__lookup_order", {"order": "881"}, "asked", "error",
                               "only one approval can be pending at a time"),
                ToolCallRecord(event.id, "t2", "mcp__shop__refund", {"amount": 12.5, "order": "881"}, "asked",
                               "deferred", "Asked the owner", rid)])
        assert store.release(HOLDER, gen, now=now - 99)
    return event.id, rid


async def test_an_approval_opens_with_its_call_and_conversation_and_is_answered_there(
    db_path: Path, clock: ManualClock
) -> None:
    event_id, rid = asked_by_a_webhook(db_path, clock)
    app: ConsoleApp = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(ApprovalsPane)
        await pilot_until(pilot, lambda: pane.table.row_count == 1 and pane.laid_out, what="the approval listed")
        assert not app.query_one("#bottom").has_class("-asking")  # a short call: the pane keeps its size
        row = str(pane.table.get_row_at(0)[0])
        # Too long for the pane's width: wrapped, every argument named, and where the run came from.
        assert row.splitlines() == ["mcp__shop__refund(", "  amount=12.5,", '  order="881")',
                                    "▰▰▰▰▰▱ 8m20s apr-1-abcdef12", "⚠ untrusted: github delivery-7"]
        pane.table.focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        screen = app.screen

        def shown(selector: str) -> str:
            return str(screen.query_one(selector).render())

        assert shown("#approval-tool") == "mcp__shop__refund"
        assert shown("#approval-arguments").splitlines() == ["  amount = 12.5", '  order = "881"']
        assert shown("#approval-origin") == "⚠ asked by a run that read untrusted content: github delivery-7"
        assert f"event {event_id}" in shown("#approval-sources") and "github/delivery-7" in shown("#approval-sources")
        assert "untrusted run" in shown("#approval-sources")
        conversation = shown("#approval-conversation")
        assert "the PR body" in conversation and "let me check it" in conversation
        assert '→ mcp__shop__refund(amount=12.5, order="881")' in conversation
        await pilot.press("y")
        await pilot_until(pilot, lambda: pane.table.row_count == 0, what="the approval answered")
    with reopen(db_path) as store:
        approval = store.approval(rid)
        assert approval is not None and (approval.outcome, approval.answered_via) == ("yes", "console")


async def test_an_events_detail_shows_the_transcript_with_each_calls_decision(
    db_path: Path, clock: ManualClock
) -> None:
    event_id, rid = asked_by_a_webhook(db_path, clock)
    app: ConsoleApp = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        events = app.query_one(EventsPane)
        await pilot_until(pilot, lambda: events.page is not None and bool(events.page.events), what="the events")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the event's detail")
        transcript = str(app.screen.query_one("#detail-transcript").render())
    lines = transcript.splitlines()
    assert lines[0] == f"claude:{event_id} · turn 1"
    assert "The PR mentions order 881; let me check it." in lines[1]
    assert lines[2] == '→ mcp__shop__lookup_order(order="881")  asked, error'
    assert lines[4] == f'→ mcp__shop__refund(amount=12.5, order="881")  asked, deferred (request {rid})'
    assert lines[5] == "← Asked the owner"


# The issue's call: a memo long enough that a sorted line cut at 160 characters never showed `to_account`.
PAY_MEMO = ("Invoice 2291 for the spring consulting work: see the attached statement for the hours, the rates and "
            "the expenses: pay within 14 days. Reference ACME-2291-SPRING; thanks!")
PAY = {"amount": 480, "memo": PAY_MEMO, "to_account": "DE89 3704 0044 0532 0130 00"}
PAY_ORIGIN = {"trusted": False, "summary": "asked by a run that read untrusted content: github delivery 9a1f (#1), "
                                           "tool mcp__shop__lookup_order"}


def asked_to_pay(db: Path, clock: ManualClock) -> str:
    """A GitHub-started run that read a shop lookup and asks to pay: the long-argument approval."""
    now = clock.now()
    with reopen(db) as store:
        store.ingest("github", "9a1f", {"action": "opened"}, now=now - 100)
        gen = store.acquire(HOLDER, now=now - 100)
        assert gen is not None
        (event,) = store.claim_batch(HOLDER, gen, now=now - 100)
        rid = "apr-1-0badcafe"
        draft = ApprovalDraft(rid, "mcp__x__pay(...)", 600, {"tool": "mcp__x__pay", "arguments": PAY,
                                                              "untrusted": ["github"]}, {}, event.id,
                              "mcp__x__pay", PAY, [{"event_id": event.id, "source": "github", "source_id": "9a1f"}],
                              origin=PAY_ORIGIN)
        assert store.finish(HOLDER, gen, [event.id], now=now - 100, approvals=[draft])
        assert store.release(HOLDER, gen, now=now - 99)
    return rid


def grown(app: ConsoleApp) -> bool:
    """The approvals pane has taken the room a waiting question gets (twice the lease pane's width)."""
    return app.query_one(ApprovalsPane).size.width > app.query_one("#lease").size.width * 3 // 2


def drawn(widget: Widget) -> str:
    """What the widget draws now, line by line (the terminal's view of it, not the data behind it)."""
    region = widget.content_region if isinstance(widget, DataTable) else widget.region
    return "\n".join(widget.render_line(y).text for y in range(region.height))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_long_call_is_whole_in_the_pane_and_q_stays_in_the_footer(
    db_path: Path, clock: ManualClock, size: tuple[int, int]
) -> None:
    asked_to_pay(db_path, clock)
    app: ConsoleApp = make_app(db_path, clock)
    async with app.run_test(size=size) as pilot:
        pane = app.query_one(ApprovalsPane)
        # The pane grows while a question waits: the whole row is drawn once the layout has settled.
        await pilot_until(pilot, lambda: grown(app) and pane.laid_out and "apr-1-0badcafe" in drawn(pane.table),
                          what="the pane grown and its row laid out")
        shown = drawn(pane.table)
        flat = " ".join(shown.split())
        # Every argument's name on screen, the account whole, the memo's two ends, and where the run came from.
        for name in ("amount=480", "to_account=", "memo="):
            assert name in flat, shown
        assert '"DE89 3704 0044 0532 0130 00"' in flat and "Invoice 2291" in flat and "thanks!" in flat
        assert "chars cut]" in flat and "⚠ untrusted: github delivery 9a1f (#1), tool mcp__shop__lookup_order" in flat
        assert flat.index("amount=") < flat.index("to_account=") < flat.index("memo=")  # short ones first

        def quit_key() -> FooterKey | None:
            return next((key for key in app.screen.query(FooterKey) if key.key == "q" and key.region.width), None)

        await pilot_until(pilot, lambda: quit_key() is not None, what="q in the footer")
        key = quit_key()
        assert key is not None and key.display and key.region.right <= size[0]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_approval_screen_shows_every_value_whole_and_where_it_came_from(
    db_path: Path, clock: ManualClock, size: tuple[int, int]
) -> None:
    rid = asked_to_pay(db_path, clock)
    app: ConsoleApp = make_app(db_path, clock)
    async with app.run_test(size=size) as pilot:
        pane = app.query_one(ApprovalsPane)
        await pilot_until(pilot, lambda: pane.table.row_count == 1, what="the approval listed")
        pane.table.focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        await pilot.pause()
        arguments = drawn(app.screen.query_one("#approval-arguments"))
        flat = " ".join(arguments.split())
        assert flat.startswith('amount = 480 to_account = "DE89 3704 0044 0532 0130 00" memo = "Invoice 2291')
        assert " ".join(PAY_MEMO.split()) in flat  # the whole memo, wrapped, not cut
        origin = " ".join(drawn(app.screen.query_one("#approval-origin")).split())
        assert origin == f"⚠ {PAY_ORIGIN['summary']}"
        await pilot.press("n")
        await pilot_until(pilot, lambda: pane.table.row_count == 0, what="the approval answered")
    with reopen(db_path) as store:
        approval = store.approval(rid)
        assert approval is not None and approval.outcome == "no"


async def test_the_approval_screen_shows_the_words_the_call_answers(db_path: Path, clock: ManualClock) -> None:
    now = clock.now()
    with reopen(db_path) as store:
        store.ingest("chat", "c-9", {"text": "please refund order 881, the parcel never came"}, now=now - 10)
        gen = store.acquire(HOLDER, now=now - 10)
        assert gen is not None
        (event,) = store.claim_batch(HOLDER, gen, now=now - 10)
        assert store.finish(HOLDER, gen, [event.id], now=now - 10, approvals=[ApprovalDraft(
            "apr-1-feed", 'refund(order="881")', 600, {}, {}, event.id, "refund", {"order": "881"},
            [{"event_id": event.id, "source": "chat", "source_id": "c-9"}])])
        assert store.release(HOLDER, gen, now=now - 9)
    app: ConsoleApp = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(ApprovalsPane)
        await pilot_until(pilot, lambda: pane.table.row_count == 1, what="the approval listed")
        pane.table.focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        words = " ".join(drawn(app.screen.query_one("#approval-request-words")).split())
        assert words == "Asked about: “please refund order 881, the parcel never came”"


async def test_the_events_detail_names_every_argument_of_its_approval(db_path: Path, clock: ManualClock) -> None:
    rid = asked_to_pay(db_path, clock)
    app: ConsoleApp = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        events = app.query_one(EventsPane)
        await pilot_until(pilot, lambda: events.page is not None and bool(events.page.events), what="the events")
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the event's detail")
        trail = " ".join(str(app.screen.query_one("#detail-approvals").render()).split())
    assert trail.startswith(f'{rid} mcp__x__pay(amount=480, to_account="DE89 3704 0044 0532 0130 00", memo="Invoice')
    assert 'thanks!")' in trail and f"⚠ {PAY_ORIGIN['summary']}" in trail
