"""The dispatcher: sends the paced outbox through the channels, never faster than the gap allows."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from console.core import Batch

if TYPE_CHECKING:
    from console.runtime.engine import Engine

log = logging.getLogger("agent_console.dispatcher")


class Channel(Protocol):
    name: str

    def send(self, batch: Batch) -> None:
        """Deliver the batch or raise console.core.SendError (permanent=True for a final refusal)."""


class ConsoleChannel:
    """Always on: the send is recorded in the inbox file, and the console's outbox pane shows it."""

    name = "console"

    def send(self, batch: Batch) -> None:
        log.info("sent %s message(s) under key %s", len(batch.bodies), batch.key)


class Dispatcher:
    def __init__(self, engine: Engine, channels: Sequence[Channel]) -> None:
        self.engine = engine
        self.channels = list(channels)
        self.at_most_once = False

    def _send(self, batch: Batch) -> None:
        # Every channel gets the same key; a retry after a partial failure reaches the channels that
        # already succeeded again, under that key, so they can recognise it.
        for channel in self.channels:
            channel.send(batch)

    async def run(self) -> None:
        engine = self.engine
        wake = engine.wake_event()
        while not engine.stopping:
            idle_for: float | None = engine.idle_cap
            try:
                idle_for = await self._tick()
            except Exception as exc:
                engine.note_error(f"dispatcher: {type(exc).__name__}: {exc}")
            if idle_for is not None:
                await engine.sleep(wake, idle_for)

    async def _tick(self) -> float | None:
        engine = self.engine
        if engine.mode != "active":
            return engine.idle_cap
        now = engine.clock.now()
        names = ",".join(channel.name for channel in self.channels)
        sent = await engine.on(
            "sender",
            lambda store: store.dispatch(self._send, now=now, at_most_once=self.at_most_once, channel=names),
        )
        if sent:
            engine.publish("outbox", f"sent {sent}")
            return None
        next_at = await engine.on("sender", lambda store: store.next_send_at(now=now))
        engine.publish("outbox", "checked")
        return engine.seconds_until(next_at)
