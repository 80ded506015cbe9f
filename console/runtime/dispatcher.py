"""The dispatcher: sends the paced outbox through the channels, never faster than the gap allows."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from console import telemetry
from console.core import Batch
from console.core.outbox import OutboxChannel
from console.runtime.host import ServiceHost, service_loop

log = logging.getLogger("agent_console.dispatcher")


class Dispatcher:
    def __init__(self, host: ServiceHost, channels: Sequence[OutboxChannel]) -> None:
        self.host = host
        self.channels = list(channels)
        self._traced = [TracedChannel(channel) for channel in self.channels]

    async def run(self) -> None:
        await service_loop(self.host, "dispatcher", self._tick)  # a channel's error never stops the engine

    async def _tick(self) -> float | None:
        host = self.host
        if host.mode != "active":
            return host.idle_cap
        now = host.clock.now()
        # Each channel's outcome is recorded per batch, so a retry after one channel failed does not
        # send a second copy to the channels that already took the batch.
        sent = await host.on("sender", lambda store: store.dispatch_channels(self._traced, now=now))
        if sent:
            log.info("sent %s message(s) through %s", sent, ", ".join(c.name for c in self.channels))
            host.publish("outbox", f"sent {sent}")
            return None
        next_at = await host.on("sender", lambda store: store.next_send_at(now=now))
        host.publish("outbox", "checked")
        return host.seconds_until(next_at)


class TracedChannel:
    """A channel whose every send is a `send {channel}` span (the current span while it sends: an HTTP channel
    carries its traceparent), counted by channel and outcome."""

    def __init__(self, channel: OutboxChannel) -> None:
        self.channel = channel
        self.name = channel.name
        self.at_most_once = channel.at_most_once

    def send(self, batch: Batch) -> None:
        labels = {"agent_console.outbox.channel": self.name}
        with telemetry.service_span(f"send {self.name}", {
            **labels, "agent_console.outbox.batch": batch.key, "agent_console.outbox.messages": len(batch.bodies),
            "agent_console.outbox.urgent": batch.urgent, "agent_console.outbox.attempt": batch.attempt,
        }, kind="CLIENT"):
            try:
                self.channel.send(batch)
            except Exception:
                telemetry.count("agent_console.outbox.sends", "{send}", "Outbox sends by channel and outcome",
                                {**labels, "agent_console.outbox.outcome": "failed"})
                raise
        telemetry.count("agent_console.outbox.sends", "{send}", "Outbox sends by channel and outcome",
                        {**labels, "agent_console.outbox.outcome": "sent"})
        telemetry.count("agent_console.outbox.messages", "{message}", "Messages handed to a channel",
                        labels, len(batch.bodies))
