"""The demo script, played through a real Engine without waiting between steps."""

from __future__ import annotations

from pathlib import Path

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.demo import DEMO_APPROVAL_EXPIRY, demo_settings, run_demo


async def no_wait(seconds: float) -> None:
    return None


async def test_demo_script_feeds_every_pane(tmp_path: Path) -> None:
    settings = demo_settings(Settings(), tmp_path)
    assert settings.db == tmp_path / "demo-inbox.db" and settings.approval_expiry == DEMO_APPROVAL_EXPIRY
    clock = ManualClock(1_700_000_000)
    engine = build_engine(settings, clock=clock, install_defaults=False)
    await engine.start()
    steps: list[str] = []
    try:
        await run_demo(engine, trickle_every=0, on_step=steps.append, sleep=no_wait)
    finally:
        await engine.stop()
    assert "a chat burst: three messages, one run, one reply" in steps
    assert "a poison event: fails, backs off, goes dead" in steps
    with Store.open(settings.db) as store:
        webhook = store.find_event("github", "delivery-1001")
        assert webhook is not None and webhook.duplicates == 1  # delivered twice, stored once
        assert store.find_event("manual", "demo-poison").payload == {"poison": True}  # type: ignore[union-attr]
        assert store.find_event("chat", "demo-refund").payload == {"text": "refund order 881"}  # type: ignore[union-attr]
        assert len(store.events(source="chat")) == 5
        timer = store.timer("demo-minute")
        assert timer is not None and timer.due == clock.now() + 60 and timer.every == 60
        assert store.find_event("stripe", "evt_demo_1") is not None
