"""The agent's schedules on the timers screen (issue 35): listed under the timers once there are any, with who
asked, the next fires, the last outcome, this month's spend and the expiry; tab to them, then p / u / e / d pause,
resume, renew and delete the highlighted one in the inbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable

from console.agents.scheduling import arguments_of, preview
from console.clock import ManualClock
from console.core import ApprovalDraft, ScheduleDraft, ScheduleSpec, Store
from console.tui.screens.approval import ApprovalScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app
from tests.tui.test_timers_screen import UTC, open_timers
from tests.tui.test_tool_approvals import HOLDER, drawn

HOUR = 3600
UNTRUSTED = {"trusted": False, "event_id": 1, "source": "github", "source_id": "d-1", "tainted_by": ["github d-1"]}


@pytest.fixture
def with_schedule(filled: Path, clock: ManualClock) -> Path:
    now = clock.now()
    spec = ScheduleSpec("deploys", "check deploys", "look at the deploys", "every", at=now + HOUR, every=HOUR,
                        expires_at=now + 3 * 24 * HOUR)
    with Store.open(filled) as store, store.write_transaction():  # as a run's fenced finish writes it
        store._write_schedule(ScheduleDraft(spec, UNTRUSTED), now)
    return filled


def schedule_row(screen: object) -> list[str]:
    table = screen.query_one("#schedules-table", DataTable)  # type: ignore[attr-defined]
    return [str(cell) for cell in table.get_row_at(0)] if table.row_count else []


async def test_schedules_are_listed_and_steered_from_the_timers_screen(with_schedule: Path,
                                                                       clock: ManualClock) -> None:
    app = make_app(with_schedule, clock, settings=UTC)
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await open_timers(app, pilot)
        await pilot_until(pilot, lambda: schedule_row(screen), what="the schedule's row")
        row = schedule_row(screen)
        assert row[0] == "deploys check deploys" and row[1] == "active" and row[2].startswith("in 1h00m")
        assert row[3:] == ["not yet", "$0.00", row[5], "⚠ an untrusted github #1 run"] and row[5].startswith("in 3d")
        await pilot.press("tab")
        await pilot_until(pilot, lambda: screen.focused is screen.query_one("#schedules-table"), what="tab")
        await pilot_until(pilot, lambda: "instruction 'look at the deploys'" in str(
            screen.query_one("#timers-line").render()), what="the schedule's line once its table has the focus")
        await pilot.press("p")
        await pilot_until(pilot, lambda: schedule_row(screen)[1] == "paused", what="paused")
        with reopen(with_schedule) as store:
            assert store.schedule("deploys").state == "paused"  # type: ignore[union-attr]
        await pilot.press("u")
        await pilot_until(pilot, lambda: schedule_row(screen)[1] == "active", what="resumed")
        await pilot.press("e")
        await pilot_until(pilot, lambda: schedule_row(screen)[5].startswith("in 30d"), what="renewed")
        await pilot.press("d")
        await pilot_until(pilot, lambda: not screen.query_one("#schedules-table").display, what="deleted: hidden")
        with reopen(with_schedule) as store:
            assert store.schedules() == []


async def test_the_approval_screen_shows_the_schedule_it_makes(db_path: Path, clock: ManualClock) -> None:
    """A schedule request's preview (the fire times, the interval, the expiry, the cost) is on the console's
    approval screen too, not only on the phone's card."""
    now = clock.now()
    spec = ScheduleSpec("s1-abc", "deploys", "check the deploys", "cron", cron="0 9 * * *", tz="UTC",
                        expires_at=now + 30 * 24 * HOUR)
    with reopen(db_path) as store:
        store.ingest("github", "d-1", {"comment": "schedule it"}, now=now - 100)
        gen = store.acquire(HOLDER, now=now - 100)
        assert gen is not None
        (event,) = store.claim_batch(HOLDER, gen, now=now - 100)
        arguments = arguments_of(spec, "UTC")
        details = {"tool": "schedule", "arguments": arguments,
                   "schedule_preview": preview(spec, store, now=now, zone="UTC")}
        draft = ApprovalDraft("apr-1-5ched", "schedule(...)", 600, details, {}, event.id, "schedule", arguments,
                              [{"event_id": event.id, "source": "github", "source_id": "d-1"}])
        assert store.finish(HOLDER, gen, [event.id], now=now - 100, approvals=[draft])
        assert store.release(HOLDER, gen, now=now - 99)
    app = make_app(db_path, clock)
    async with app.run_test(size=(120, 50)) as pilot:
        pane = app.query_one(ApprovalsPane)
        await pilot_until(pilot, lambda: pane.table.row_count == 1, what="the approval listed")
        pane.table.focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        await pilot.pause()
        shown = " ".join(drawn(app.screen.query_one("#approval-schedule")).split())
        assert shown.startswith("Next 5 fires (your time): ") and "09:00:00 UTC;" in shown
        assert "Interval: cron 0 9 * * * (UTC)" in shown and "Instruction: check the deploys" in shown
        assert "Estimated monthly cost:" in shown
