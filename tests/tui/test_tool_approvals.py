"""The console and tools (issue 9): an approval shows the call it is bound to and where its run came from;
enter opens it with the full arguments and the conversation so far, and y there answers it; an event's detail
shows the run's transcript with each tool call's decision."""

from __future__ import annotations

from pathlib import Path

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
        await pilot_until(pilot, lambda: pane.table.row_count == 1, what="the approval listed")
        row = str(pane.table.get_row_at(0)[0])
        assert row.startswith("mcp__shop__refund(amount=12.5") and row.endswith("← github")
        pane.table.focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        screen = app.screen

        def shown(selector: str) -> str:
            return str(screen.query_one(selector).render())

        assert shown("#approval-tool") == "mcp__shop__refund"
        assert '"amount": 12.5' in shown("#approval-arguments") and '"order": "881"' in shown("#approval-arguments")
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
