"""The console shows an owner's answer whose event died: the approvals pane says which approved call did not
happen and what to retry; the events pane's line under the table and the dead event's detail say the same, and
its retry takes the line away."""

from __future__ import annotations

from pathlib import Path

from console.agents.base import RunContext
from console.clock import ManualClock
from console.core import Store
from console.tui.screens.detail import DetailScreen
from tests.support import pilot_until
from tests.tui.scenes import START, make_app, started, text_of

SIZE = (100, 30)
ACTION = 'mcp__shop__refund(order="881")'


def a_yes_lost_in_three_crashes(db: Path) -> int:
    """An approved refund whose answer's event died in crashes (before the console starts); its id."""
    at = START - 10_000
    with Store.open(db, lease_ttl=60, max_attempts=3, backoff_base=0) as store:
        store.ingest("chat", "m1", {"text": "refund order 881"}, now=at)
        gen = store.acquire("asker", now=at)
        assert gen is not None
        ctx = RunContext(store, store.claim_batch("asker", gen, now=at), at, "asker", gen, approval_expiry=3600)
        request = ctx.ask(ACTION, tool="mcp__shop__refund", arguments={"order": "881"})
        assert ctx.finish() and store.release("asker", gen, now=at)
        store.answer_approval(request.request_id, "yes", now=at + 1, via="cli")
        for crash in range(4):
            at += 100
            gen = store.acquire(f"worker-{crash}", now=at)
            assert gen is not None
            store.claim_batch(f"worker-{crash}", gen, now=at)
        answer = store.find_event("approval", request.request_id)
        assert answer is not None and answer.status == "dead"
        assert store.acquire("worker-b", now=START) is not None  # the console stands by: its retry is not run here
        return answer.id


async def test_the_approvals_pane_and_the_detail_say_an_approved_call_was_not_run(db_path: Path,
                                                                                  clock: ManualClock) -> None:
    answer_id = a_yes_lost_in_three_crashes(db_path)
    line = f"approved, but not run: its event #{answer_id} is dead (lost in 3 crashes) — retry #{answer_id} to run it"
    app = make_app(db_path, clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        shown = " ".join(text_of(app, "#approvals-stranded").split())  # the pane wraps it
        assert shown == f"yes {ACTION}: {line}"
        under_the_table = " ".join(text_of(app, "#events-error").split())  # the selected row: the dead answer
        assert under_the_table == f"#{answer_id} yes to {ACTION}: {line}"

        await pilot.press("enter")  # the newest event, the dead answer, is selected
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="detail")
        why = " ".join(text_of(app, "#detail-why").split())
        assert line in why
        await pilot.press("r")  # retried from its detail: no longer stranded
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, DetailScreen), what="detail closed")
        await pilot_until(pilot, lambda: not app.screen.query_one("#approvals-stranded").display,
                          what="the stranded line gone")
    with Store.open(db_path) as store:
        assert store.stranded_answers() == []
        assert store.event(answer_id).status == "pending"  # type: ignore[union-attr]
