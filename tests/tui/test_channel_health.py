"""Issue 36, item 2: a phone or mail channel that stopped gets the banner and the toast a down tool server gets,
its reason whole; messages held over the hourly cap are listed in the outbox pane and R releases them (asking)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.agents.base import RunContext
from console.clock import ManualClock
from console.core import Store
from console.tui.screens.confirm import ConfirmScreen
from console.tui.widgets.outbox_pane import OutboxPane
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started, text_of
from tests.tui.test_snapshots import ready

Compare = Callable[..., bool]
SIZES = [(80, 24), (120, 40)]
IDS = ["80x24", "120x40"]
TOKEN_REFUSED = ("the bot token was refused (401 Unauthorized): revoked or wrong; set a new one and restart the "
                 "console")
MAIL_OFFLINE = "the IMAP server imap.example.org:993 did not answer (connection refused); trying again in 60 s"


def stopped_channels_and_held_messages(db: Path, clock: ManualClock) -> None:
    """Telegram paused (a refused token), e-mail offline, and three replies held over a cap of one an hour."""
    now = clock.now()
    with Store.open(db, seed=7, max_messages_per_hour=1) as store:
        assert store.set_chat_health("telegram", "paused", TOKEN_REFUSED, now=now - 30)
        assert store.set_chat_health("email", "offline", MAIL_OFFLINE, now=now - 20)
        store.ingest("chat", "c-1", {"text": "what's on today?"}, now=now - 60)
        gen = store.acquire("worker", now=now - 60)
        assert gen is not None
        ctx = RunContext(store, store.claim_batch("worker", gen, now=now - 60), now - 60, "worker", gen,
                         approval_expiry=600)
        for body in ("Dentist at 9", "Lunch with Sam at 1", "Call the bank before 5"):
            ctx.say(body)
        assert ctx.finish()
        assert store.held_count() == 2  # one sent under the cap, then the cap's own notice, two held
        store.release("worker", gen)


def notified(app: Any) -> list[tuple[str, str]]:
    return [(n.title, n.message) for n in app._notifications]


async def test_a_stopped_channel_gets_the_banner_and_a_toast_with_its_reason_whole(db_path: Path,
                                                                                   clock: ManualClock) -> None:
    stopped_channels_and_held_messages(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        await pilot_until(pilot, lambda: "Telegram paused" in text_of(app, "#header-banner"), what="the banner")
        banner = " ".join(text_of(app, "#header-banner").split())
        assert f"Telegram paused — {TOKEN_REFUSED}" in banner and f"E-mail offline — {MAIL_OFFLINE}" in banner
        assert ("Telegram paused", TOKEN_REFUSED) in notified(app)
        assert ("E-mail offline", MAIL_OFFLINE) in notified(app)
        # back to ok: the banner goes, and a later stop is told again
        with reopen(db_path) as store:
            store.set_chat_health("telegram", "ok", None, now=clock.now())
            store.set_chat_health("email", "ok", None, now=clock.now())
        app.mark("header")
        await pilot_until(pilot, lambda: not app.query_one("#header-banner").has_class("-shown"),
                          what="the banner gone")


async def test_held_messages_are_listed_and_r_releases_them_after_a_yes(db_path: Path, clock: ManualClock) -> None:
    stopped_channels_and_held_messages(db_path, clock)
    app = make_app(db_path, clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        pane = app.query_one(OutboxPane)
        await pilot_until(pilot, lambda: "held #1" in text_of(app, "#outbox-lines"), what="the held lines")
        lines = text_of(app, "#outbox-lines")
        assert "⏸ held #1 Lunch with Sam at 1" in lines and "⏸ held #2 Call the bank before 5" in lines
        assert "held 2" in text_of(app, "#outbox-counts")
        pane.focus()
        await pilot.press("R")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        assert "Release 2 held messages?" in str(app.screen.question)  # type: ignore[attr-defined]
        await pilot.press("n")  # a no releases nothing
        await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="the question gone")
        with reopen(db_path) as store:
            assert store.held_count() == 2
        await pilot.press("R")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question again")
        await pilot.press("y")
        await pilot_until(pilot, lambda: "held #" not in text_of(app, "#outbox-lines"), what="released")
        with reopen(db_path) as store:
            assert store.held_count() == 0
            bodies = [m.body for m in store.outbox_messages(limit=20)]  # queued, or sent by now
        assert "Lunch with Sam at 1" in bodies and "Call the bank before 5" in bodies
        assert any(title == "Released" and "2 held messages" in message for title, message in notified(app))


async def test_a_read_only_console_answers_r_with_a_flash(db_path: Path, clock: ManualClock) -> None:
    stopped_channels_and_held_messages(db_path, clock)
    app = make_app(db_path, clock, read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(app, pilot)
        app.query_one(OutboxPane).focus()
        await pilot.press("R")
        await pilot_until(pilot, lambda: any(title == "Read-only" for title, _ in notified(app)), what="the flash")
        assert not isinstance(app.screen, ConfirmScreen)
        with reopen(db_path) as store:
            assert store.held_count() == 2


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_channels_down_snapshot(snap_compare: Compare, db_path: Path, clock: ManualClock,
                                size: tuple[int, int]) -> None:
    stopped_channels_and_held_messages(db_path, clock)
    app = make_app(db_path, clock)

    async def run_before(pilot: Pilot[Any]) -> None:
        await ready(app)(pilot)
        await pilot_until(pilot, lambda: app.query_one("#header-banner").has_class("-shown"), what="the banner")
        app.query_one(OutboxPane).focus()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
