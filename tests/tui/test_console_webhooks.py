"""The console embeds the webhook receiver when the config enables it, and shows its address and counts."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from console.clock import ManualClock
from tests.edges.signing import SECRETS, sign
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app

WEBHOOKS = {"enabled": True, "host": "127.0.0.1", "port": 0,
            "sources": {"github": {"verifier": "github", "secret_env": "CONSOLE_TEST_GH_SECRET"}}}


async def test_console_receives_signed_webhooks_and_counts_verdicts(
    db_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONSOLE_TEST_GH_SECRET", SECRETS["github"])
    app = make_app(db_path, clock, settings={"webhooks": WEBHOOKS})
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot_until(pilot, lambda: app.receiver is not None, what="the receiver")
        assert app.receiver is not None
        url = f"{app.receiver.url}/hooks/github"
        body = b'{"repository": {"full_name": "me/agent"}, "sender": {"login": "kim"}, "commits": []}'
        async with aiohttp.ClientSession() as session:
            good = sign("github", body, now=clock.now(), delivery_id="tui-1")
            async with session.post(url, data=body, headers=good) as response:
                assert response.status == 200 and await response.json() == {"stored": True}
            async with session.post(url, data=body, headers=good) as response:
                assert await response.json() == {"stored": False}
            bad = sign("github", body, now=clock.now(), delivery_id="tui-2", secret="wrong")
            async with session.post(url, data=body, headers=bad) as response:
                assert response.status == 401
        summary = app.receiver_summary() or ""
        assert "1 stored · 1 dup · 1 refused" in summary and app.receiver.url in summary
        await pilot_until(pilot, lambda: summary in str(app.query_one("#header-title").render()), what="header")
    with reopen(db_path) as store:
        event = store.find_event("github", "tui-1")
        assert event is not None and event.duplicates == 1 and store.find_event("github", "tui-2") is None


async def test_a_receiver_that_cannot_start_is_a_notification_not_a_crash(
    db_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONSOLE_TEST_GH_SECRET", raising=False)
    app = make_app(db_path, clock, settings={"webhooks": WEBHOOKS})
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot_until(pilot, lambda: app.started, what="the engine")
        await pilot_until(pilot, lambda: any("Webhook receiver not started" in (n.title or "")
                                            for n in app._notifications), what="the notification")
        assert app.receiver is None and app.is_running
