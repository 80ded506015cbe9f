"""The demo script, played through a real Engine without waiting between steps; the demo's world of its own
(tests/e2e/test_demo_world.py runs it in a real terminal beside the owner's full config)."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import ConfigError, Settings
from console.core import Store
from console.demo import DEMO_APPROVAL_EXPIRY, demo_settings, demo_world, run_demo


async def no_wait(seconds: float) -> None:
    return None


async def test_demo_script_feeds_every_pane(tmp_path: Path) -> None:
    settings = demo_settings(tmp_path)
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


def test_the_demo_starts_from_the_built_in_settings_whatever_the_owners_are(tmp_path: Path) -> None:
    settings = demo_settings(tmp_path)
    changed = {f.name for f in dataclasses.fields(Settings)
               if f.name != "origins" and getattr(settings, f.name) != getattr(Settings(), f.name)}
    # Only where its files go and how fast it moves: no channel, e-mail, receiver, MCP server or agent of the owner's.
    assert changed == {"db", "instructions", "outbox_gap", "approval_expiry", "lease_ttl", "backoff_base",
                       "backoff_max"}
    assert (settings.channels, settings.email, settings.webhooks, settings.mcp_servers, settings.agent) == (
        [], {}, {}, None, "offline")
    assert settings.inbox_folder == tmp_path  # the example shop's orders and the telemetry file go there too


def test_the_demos_environment_keeps_no_secret_and_comes_back_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-real")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector.example")
    monkeypatch.setenv("AGENT_CONSOLE_AGENT", "claude")
    monkeypatch.setenv("TELEGRAM_TOKEN", "123:abc")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    before = dict(os.environ)
    with demo_world() as settings:
        assert stat.S_IMODE(settings.inbox_folder.stat().st_mode) == 0o700
        inside = dict(os.environ)
    assert not settings.inbox_folder.exists()  # removed on quit
    assert {"ANTHROPIC_API_KEY", "OTEL_EXPORTER_OTLP_ENDPOINT", "AGENT_CONSOLE_AGENT",
            "TELEGRAM_TOKEN"}.isdisjoint(inside)
    assert inside["LC_ALL"] == "C.UTF-8" and inside["PATH"] == before["PATH"]
    assert dict(os.environ) == before


def test_a_kept_demo_stays_where_the_flag_says(tmp_path: Path) -> None:
    kept = tmp_path / "my-demo"
    with demo_world(kept) as settings:
        settings.db.write_bytes(b"inbox")  # type: ignore[union-attr]
    assert settings.inbox_folder == kept and (kept / "demo-inbox.db").exists()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    with pytest.raises(ConfigError, match="not an empty folder"), demo_world(kept):
        pass  # a second demo into a folder with the first one's files is refused, not mixed in
