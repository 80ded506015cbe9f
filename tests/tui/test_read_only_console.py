"""The --read-only console (issue 21.9): for a second screen or a shared terminal. It watches (a commit
elsewhere shows at once) and cannot answer, retry, discard, restore, inject, stall or send: its engine never takes
the lease and opens the inbox read-only, and the keys that would change the inbox are not offered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console.clock import ManualClock
from console.core import Store
from console.tui.app import ConsoleApp
from console.tui.read_only import READ_ONLY_FLASH
from console.tui.screens.approval import ApprovalScreen
from console.tui.screens.detail import DetailScreen
from console.tui.widgets.approvals_pane import ApprovalsPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, shown_ids, started, text_of

SIZE = (100, 30)
CHANGES = ("console.inject", "console.approve", "console.decline", "console.retry", "console.retry_all",
           "console.discard", "console.stall", "console.budget", "console.undo")


def the_inbox(db: Path, now: int) -> dict[str, Any]:
    with reopen(db) as store:
        status = store.status(now=now)
        status["attempts"] = store.connection.execute("SELECT COUNT(*) FROM attempts").fetchall()
        return status


def offered(app: ConsoleApp) -> set[str]:
    return {b.binding.id for b in app.screen.active_bindings.values() if b.binding.id and b.binding.show}


async def test_a_read_only_console_watches_and_changes_nothing(filled: Path, clock: ManualClock) -> None:
    before = the_inbox(filled, clock.now())
    app = make_app(filled, clock, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        assert app.engine.mode == "watching"
        assert "read-only" in text_of(app, "#header-title")
        assert not offered(app) & set(CHANGES)
        main = app.screen
        for key in ("y", "n", "r", "R", "D", "u", "i", "x", "b"):
            await pilot.press(key)
        await app.settle()
        assert app.screen is main  # no form, no question: nothing to confirm
        # each writing key answered with the short flash (issue 36, item 6), none silently
        flashes = [n for n in app._notifications if n.title == "Read-only"]
        assert len(flashes) == 9 and all(n.message == READ_ONLY_FLASH for n in flashes)
        # An approval's screen and an event's detail offer no answer nor retry either.
        app.query_one(ApprovalsPane).table.focus()
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the approval's screen")
        assert not {"approval.yes", "approval.no"} & offered(app)
        await pilot.press("y")
        await pilot.press("escape")
        dead = next(e for e in app.query_one("EventsPane").page.events if e.status == "dead")  # type: ignore[attr-defined]
        await app.main.open_detail(dead.id)
        await pilot_until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the dead event's detail")
        assert not {"detail.retry", "detail.approve", "detail.restore"} & offered(app)
        await pilot.press("r")
        await pilot_until(pilot, lambda: any("read-only" in str(n.message) for n in app._notifications),
                          what="r saying why nothing happens")
        await pilot.press("escape")
        assert the_inbox(filled, clock.now()) == before
        with reopen(filled) as store:  # a commit elsewhere shows: it watches
            store.ingest("chat", "c-9", {"text": "seen from the second screen"}, now=clock.now())
            new_id = store.find_event("chat", "c-9").id  # type: ignore[union-attr]
        await pilot_until(pilot, lambda: new_id in shown_ids(app), what="the new event shown")
    with Store.open(filled) as store:
        assert store.lease() is not None and store.lease().holder != app.engine.holder  # type: ignore[union-attr]
