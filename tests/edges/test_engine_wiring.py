"""The receiver next to a real engine: a stored delivery wakes the worker at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from console.assembly import build_engine, receiver_beside
from console.clock import ManualClock
from console.core import Store
from tests.edges.conftest import NOW, webhook_settings
from tests.edges.signing import ENV_NAMES, SECRETS, body_for, sign


async def test_delivery_wakes_the_engine(tmp_path: Path) -> None:
    settings = webhook_settings(tmp_path / "inbox.db")
    settings.webhooks["secrets_file"] = str(tmp_path / "secrets.env")
    (tmp_path / "secrets.env").write_text("".join(f"{ENV_NAMES[k]}={v}\n" for k, v in SECRETS.items()))
    (tmp_path / "secrets.env").chmod(0o600)
    clock = ManualClock(NOW)
    # Without the receiver's wake-up the worker would not look again for 30 s: its idle cap would not notice
    # the event within the wait below, and it has no watcher of the file's commits (watch_interval None).
    engine = build_engine(settings, clock=clock, holder="wired", idle_cap=30, watch_interval=None,
                          install_defaults=False)
    await engine.start()
    receiver = receiver_beside(settings, engine)
    await receiver.start()
    try:
        assert receiver.clock is clock
        body = body_for("hmac", "wake-1")
        async with aiohttp.ClientSession() as http, http.post(
            f"{receiver.url}/hooks/home", data=body, headers=sign("hmac", body, now=NOW, delivery_id="wake-1")
        ) as response:
            assert response.status == 200

        def done(store: Store) -> bool:
            event = store.find_event("home", "wake-1")
            return event is not None and event.status == "done"

        deadline = asyncio.get_running_loop().time() + 10
        while not await engine.read(done):
            assert asyncio.get_running_loop().time() < deadline, "the worker was not woken by the delivery"
            await asyncio.sleep(0.01)
    finally:
        await receiver.stop()
        await engine.stop()
