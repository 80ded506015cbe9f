"""The dispatcher: sends the paced outbox through the channels, never faster than the gap allows."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from console.core.outbox import OutboxChannel

if TYPE_CHECKING:
    from console.runtime.engine import Engine

log = logging.getLogger("agent_console.dispatcher")


class Dispatcher:
    def __init__(self, engine: Engine, channels: Sequence[OutboxChannel]) -> None:
        self.engine = engine
        self.channels = list(channels)

    async def run(self) -> None:
        engine = self.engine
        wake = engine.wake_event()
        while not engine.stopping:
            idle_for: float | None = engine.idle_cap
            try:
                idle_for = await self._tick()
            except Exception as exc:  # a channel's error never stops the engine
                engine.note_error(f"dispatcher: {type(exc).__name__}: {exc}")
            if idle_for is not None:
                await engine.sleep(wake, idle_for)

    async def _tick(self) -> float | None:
        engine = self.engine
        if engine.mode != "active":
            return engine.idle_cap
        now = engine.clock.now()
        # Each channel's outcome is recorded per batch, so a retry after one channel failed does not
        # send a second copy to the channels that already took the batch.
        sent = await engine.on("sender", lambda store: store.dispatch_channels(self.channels, now=now))
        if sent:
            log.info("sent %s message(s) through %s", sent, ", ".join(c.name for c in self.channels))
            engine.publish("outbox", f"sent {sent}")
            return None
        next_at = await engine.on("sender", lambda store: store.next_send_at(now=now))
        engine.publish("outbox", "checked")
        return engine.seconds_until(next_at)
