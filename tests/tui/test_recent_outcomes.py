"""Issue 36, item 6: the approvals pane's recent outcomes lead with the argument that identifies what was acted on,
whole. At 120 columns `refund(order="88…` was cut by the pane (the call came in the model's shortest-first order,
one line, cut at the edge): which order was refunded could not be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.clock import ManualClock
from console.core import ApprovalDraft, Store
from console.trust.callview import brief_call
from console.tui.app import ConsoleApp
from tests.support import pilot_until
from tests.tui.scenes import START, make_app
from tests.tui.test_snapshots import Compare, ready

HOLDER = "worker-x:1"
REFUND = {"order": "8812345678", "amount": 120, "reason": "the parcel never arrived and the customer asked twice"}
MAIL = {"to": "ops@example.com", "subject": "weekly numbers", "body": "Dear ops, " + "the numbers are in. " * 12}


def answered(db: Path, clock: ManualClock) -> None:
    """Two calls a run asked for, answered: the refund yes in the console, the mail no on Telegram."""
    now = clock.now()
    with Store.open(db) as store:
        store.ingest("chat", "c-1", {"text": "refund 8812345678 and mail ops"}, now=now - 100)
        gen = store.acquire(HOLDER, now=now - 100)
        assert gen is not None
        (event,) = store.claim_batch(HOLDER, gen, now=now - 100)
        drafts = [ApprovalDraft(f"apr-{event.id}-{n}", f"{tool}(...)", 600, {}, None, event.id, tool, arguments, [])
                  for n, (tool, arguments) in enumerate((("mcp__shop__refund", REFUND),
                                                         ("mcp__mail__send_email", MAIL)), 1)]
        assert store.finish(HOLDER, gen, [event.id], now=now - 100, approvals=drafts)
        store.answer_approval(drafts[1].request_id, "no", now=now - 60, via="telegram")
        store.answer_approval(drafts[0].request_id, "yes", now=now - 30, via="console")
        store.acquire("elsewhere", now=now + 10_000)  # another worker holds the lease: nothing runs meanwhile


def resolved_lines(app: ConsoleApp) -> list[str]:
    return str(app.query_one("#approvals-resolved").render()).split("\n")


def test_the_identifying_argument_leads_and_is_whole() -> None:
    assert brief_call("refund", REFUND, 28) == 'refund(order="8812345678", …)'
    assert brief_call("refund", REFUND, 42) == 'refund(order="8812345678", amount=120, …)'
    assert brief_call("refund", REFUND, 60) == 'refund(order="8812345678", amount=120, reason="the p…twice")'
    assert brief_call("pay", {"amount": 5}, 10) == "pay(amount=5)"  # a quantity leads when nothing else identifies
    assert brief_call("send", {"body": "x" * 80, "to": "a@b.example"}, 30) == 'send(to="a@b.example", …)'


@pytest.mark.parametrize(("size", "both"), [((80, 24), False), ((120, 40), False), ((160, 48), True)],
                         ids=["80x24", "120x40", "160x48"])
async def test_recent_outcomes_show_the_order_whole(db_path: Path, clock: ManualClock, size: tuple[int, int],
                                                    both: bool) -> None:
    """The newest outcome is shown whole at every width, its order on one line; the one before it too where the
    pane has the lines for it (never a part of it)."""
    answered(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=size) as pilot:
        await pilot_until(pilot, lambda: any('order="8812345678"' in line for line in resolved_lines(app)),
                          what="the refund's order, whole on its line")
        lines = resolved_lines(app)
        width = app.query_one("#approvals-resolved").content_size.width
        assert all(len(line) <= width for line in lines), lines
        assert lines[1].startswith("yes") and lines[-1].endswith(("· console", "· Telegram")), lines
        shown = " ".join(lines)
        assert ("mcp__mail__send_email(" in shown) is both and ('to="ops@example.com"' in shown) is both, lines
        assert ("· Telegram" in shown) is both


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_recent_outcomes_snapshot(snap_compare: Compare, db_path: Path, size: tuple[int, int]) -> None:
    clock = ManualClock(START)
    answered(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        await pilot_until(pilot, lambda: any("8812345678" in line for line in resolved_lines(app)),
                          what="the recent outcomes")

    assert snap_compare(app, terminal_size=size, run_before=run_before)
