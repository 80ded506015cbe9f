"""Scripted traffic for `agent-console --demo`: every pane moves within the first minute.

Driven only through the Engine API (ingest, write), on the wall clock, against a fresh temporary
inbox: a webhook delivered twice, a chat burst, a poison event, an approval that expires in a
minute, a one-minute timer and a short outbox gap.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from console.config import Settings
from console.core import Store

DEMO_GAP = 20  # seconds between held sends, so the outbox countdown is watchable
DEMO_APPROVAL_EXPIRY = 60
DEMO_LEASE_TTL = 15  # a stalled worker is taken over by a second console within seconds


class DemoEngine(Protocol):
    async def ingest(self, source: str, source_id: str, payload: Any) -> bool: ...
    async def write(self, fn: Callable[[Store], Any]) -> Any: ...
    @property
    def clock(self) -> Any: ...


def demo_settings(settings: Settings, folder: Path) -> Settings:
    """The user's settings with a fresh inbox in `folder` and short intervals."""
    return dataclasses.replace(
        settings, db=folder / "demo-inbox.db", outbox_gap=DEMO_GAP, approval_expiry=DEMO_APPROVAL_EXPIRY,
        lease_ttl=DEMO_LEASE_TTL, backoff_base=3, backoff_max=10,
    )


def github_push(delivery: str) -> dict[str, Any]:
    return {
        "delivery": delivery, "ref": "refs/heads/main",
        "repository": {"full_name": "me/agent-console"}, "sender": {"login": "octocat"},
        "head_commit": {"message": "Fix the outbox countdown"},
    }


def script(engine: DemoEngine) -> list[tuple[float, str, Callable[[], Awaitable[Any]]]]:
    """(seconds after start, what it shows, the step)."""

    def ingest(source: str, source_id: str, payload: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: engine.ingest(source, source_id, payload)

    def minute_timer() -> Awaitable[Any]:
        now = engine.clock.now()
        return engine.write(
            lambda store: store.add_timer("demo-minute", now + 60, {"text": "one-minute timer"}, every=60, now=now))

    def chat_burst() -> Awaitable[Any]:
        # Delivered in one commit, as a chat gateway flushing its queue would: the worker claims all three.
        now = engine.clock.now()
        burst = [("chat", "demo-chat-1", {"text": "are you there?"}),
                 ("chat", "demo-chat-2", {"text": "remind me to water the plants"}),
                 ("chat", "demo-chat-3", {"text": "and book the dentist"})]
        return engine.write(lambda store: store.ingest_many(burst, now=now))

    return [
        (0.5, "a GitHub webhook", ingest("github", "delivery-1001", github_push("delivery-1001"))),
        (3.0, "the same webhook delivered again: refused",
         ingest("github", "delivery-1001", github_push("delivery-1001"))),
        (5.0, "a chat burst: three messages, one run, one reply", chat_burst),
        (8.0, "a poison event: fails, backs off, goes dead", ingest("manual", "demo-poison", {"poison": True})),
        (11.0, "a message that needs approval (expires in a minute)",
         ingest("chat", "demo-refund", {"text": "refund order 881"})),
        (13.0, "a one-minute timer", minute_timer),
        (16.0, "another chat, held by the outbox gap", ingest("chat", "demo-chat-4", {"text": "what's on today?"})),
        (25.0, "a Stripe webhook", ingest("stripe", "evt_demo_1", {"type": "charge.succeeded", "data": {
            "object": {"amount": 4200, "currency": "eur"}}})),
    ]


async def run_demo(engine: DemoEngine, *, trickle_every: float = 12.0, on_step: Callable[[str], None] | None = None,
                   sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Play the script, then keep a gentle trickle of chat messages so the sparkline moves."""
    elapsed = 0.0
    for at, label, step in script(engine):
        await sleep(max(0.0, at - elapsed))
        elapsed = at
        await step()
        if label and on_step is not None:
            on_step(label)
    serial = 0
    while trickle_every > 0:
        await sleep(trickle_every)
        serial += 1
        await engine.ingest("chat", f"demo-trickle-{serial}", {"text": f"note #{serial}"})
