"""A real engine (offline agent, manual clock, real inbox file) with one phone channel pointed at a stand-in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from console.agents.base import Agent
from console.assembly import build_engine
from console.clock import ManualClock
from console.config import Settings
from console.core import Store
from console.edges.channels import build_channels
from console.edges.phone import PhoneChannel
from console.runtime.engine import Engine

START = 1_790_000_000
RISKY = {"text": "refund order 881"}


def phone_settings(tmp_path: Path, channel: dict[str, Any], **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(db=tmp_path / "inbox.db", lease_ttl=60, outbox_gap=3600, backoff_base=1,
                                  backoff_max=5, approval_expiry=600, channels=[channel],
                                  webhooks={"secrets_file": str(tmp_path / "secrets.env")})
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def running(settings: Settings, clock: ManualClock, env: dict[str, str], *, holder: str = "phone",
                  tune: Callable[[PhoneChannel], None] | None = None, agent: Agent | None = None,
                  ) -> AsyncIterator[Engine]:
    channels = build_channels(settings, clock=clock, environ=env)
    for channel in channels:
        if isinstance(channel, PhoneChannel):
            channel.reconnect_base = 0.05
            channel.reconnect_max = 0.2
            if tune is not None:
                tune(channel)
    engine = build_engine(settings, clock=clock, holder=holder, channels=channels, idle_cap=0.1, install_defaults=False,
                          agent=agent)
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()


async def until(check: Callable[[], Any], what: str, *, limit: float = 20.0) -> Any:
    """Wait for a condition on the stand-in or the test's own state (bounded)."""
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        result = check()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, f"not seen within {limit} s: {what}"
        await asyncio.sleep(0.01)


async def stored(engine: Engine, check: Callable[[Store], Any], what: str, *, limit: float = 20.0) -> Any:
    """Wait for a condition on the inbox (bounded)."""
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        result = await engine.read(check)
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, f"not seen within {limit} s: {what}"
        await asyncio.sleep(0.01)


def performed(store: Store, request_id: str) -> int:
    """How many times the approved call ran (0 if never): its journal step, keyed by the request."""
    step = store.journal_step(f"tool:{request_id}")
    return 0 if step is None else step.executions
