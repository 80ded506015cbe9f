"""Issue 36: an outbox message's screen is live: a message sent while it is open (here by another process's
dispatcher) reads "sent", and "send now" is no longer offered; it said "queued" until reopened."""

from __future__ import annotations

from pathlib import Path

from console.clock import ManualClock
from console.tui.screens.message import MessageScreen
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started, text_of

SIZE = (100, 30)


async def test_the_message_screen_follows_a_send_made_elsewhere(filled: Path, clock: ManualClock) -> None:
    with reopen(filled) as store:
        store.dispatch(lambda batch: None, now=clock.now(), channel="console")  # what is due goes; the gap starts
        message_id = store.queue_message("the weekly digest", now=clock.now())
    app = make_app(filled, clock, settings={"outbox_gap": 3600})
    async with app.run_test(size=SIZE) as pilot:
        await started(app, pilot)
        await app.main.open_message(message_id)
        await pilot_until(pilot, lambda: isinstance(app.screen, MessageScreen), what="the message")
        assert text_of(app, "#message-facts").startswith("queued")
        assert str(app.screen.query_one("#message-dialog").border_subtitle).startswith("s send now")
        with reopen(filled) as elsewhere:  # the owner's `send-now` in a shell, then a dispatcher sends it
            assert elsewhere.send_now(message_id, now=clock.now())
            assert elsewhere.dispatch(lambda batch: None, now=clock.now(), channel="console") == 1
        await pilot_until(pilot, lambda: text_of(app, "#message-facts").startswith("sent"), what="shown sent")
        assert str(app.screen.query_one("#message-dialog").border_subtitle) == "c copy · esc close"
