"""The dispatcher: sends the paced outbox through the channels, never faster than the gap allows.

The core keeps the books: Store.plan_send claims the batch that is due and says which channels are to send it
now (the at-most-once ones already marked, the ones behind an earlier batch left waiting), and
Store.record_send records each channel's outcome as soon as it is known, then settles the batch. This service
does the sending in between, one channel after another in their order:

- a channel whose send is a coroutine function (the phone channels, the mail replies) is awaited here, on the
  engine's loop, where its HTTP session lives; no thread waits for it;
- a blocking channel (console, file, HTTP, apprise) runs on the sender thread, in the same trip as the
  bookkeeping around it: a batch to blocking channels only costs one trip off the loop. The sender thread is a
  daemon (runtime/dbthread.py): a channel stuck past its own timeout never holds the process's exit, as a
  worker of asyncio.to_thread's pool would.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar, cast

from console import telemetry
from console.core import Batch, ChannelOutcome, SendPlan, Store
from console.core.outbox import OutboxChannel
from console.runtime.host import ServiceHost, service_loop

log = logging.getLogger("agent_console.dispatcher")
T = TypeVar("T")


class OnSender(Protocol):
    """Runs a function with the Store on the sender thread (the engine's), or inline (a test's store)."""

    def __call__(self, fn: Callable[[Store], T]) -> Awaitable[T]: ...


class Dispatcher:
    def __init__(self, host: ServiceHost, channels: Sequence[OutboxChannel]) -> None:
        self.host = host
        self.channels = list(channels)
        self._traced = [TracedChannel(channel) for channel in self.channels]

    async def run(self) -> None:
        await service_loop(self.host, "dispatcher", self._tick)  # a channel's error never stops the engine

    def _on_sender(self, fn: Callable[[Store], T]) -> Awaitable[T]:
        return self.host.on("sender", fn)

    async def _tick(self) -> float | None:
        host = self.host
        if host.mode != "active":
            return host.idle_cap
        sent, next_at = await send_once(self._on_sender, self._traced, now=host.clock.now())
        if sent:
            log.info("sent %s message(s) through %s", sent, ", ".join(c.name for c in self.channels))
            host.publish("outbox", f"sent {sent}")
            return None  # another batch may be due at once (the urgent lane, a retry)
        host.publish("outbox", "checked")
        return host.seconds_until(next_at)


@dataclass(frozen=True)
class _Leg:
    """Where a send stands after a trip to the sender thread."""

    plan: SendPlan | None
    position: int = 0           # the next channel of plan.send_to to send (one awaited on the loop), if not done
    done: bool = True
    sent: int = 0               # messages delivered to every channel, once done
    next_at: int | None = None  # when something is next due, once done without a send


async def send_once(
    on_sender: OnSender, channels: Sequence[OutboxChannel | TracedChannel], *, now: int
) -> tuple[int, int | None]:
    """Send at most one batch to every channel, each under the batch's one idempotency key. Returns the messages
    delivered to every channel, and when the outbox next has something due (None: nothing queued; only
    looked up when nothing was sent)."""
    traced = [channel if isinstance(channel, TracedChannel) else TracedChannel(channel) for channel in channels]
    by_name = {channel.name: channel for channel in traced}

    def on_thread(store: Store, plan: SendPlan | None, position: int, outcome: ChannelOutcome | None) -> _Leg:
        """One trip's work on the sender thread: plan (first trip), record the outcome a loop channel brought back,
        send through the blocking channels that follow, and settle the batch once every channel has been tried."""
        if plan is None:
            plan = store.plan_send(traced, now=now)
            if plan is None:
                return _Leg(None, next_at=store.next_send_at(now=now))
        outcomes = [] if outcome is None else [outcome]
        while position < len(plan.send_to):
            channel = by_name[plan.send_to[position]]
            if outcomes:  # recorded before the next send: a crash now does not send that channel a second copy
                store.record_send(plan, outcomes, now=now, settle=False)
            if channel.on_loop:
                return _Leg(plan, position, done=False)
            outcomes = [channel.send_blocking(plan.batch)]
            position += 1
        sent = store.record_send(plan, outcomes, now=now)
        return _Leg(plan, position, sent=sent, next_at=None if sent else store.next_send_at(now=now))

    leg = await on_sender(partial(on_thread, plan=None, position=0, outcome=None))
    while not leg.done:
        assert leg.plan is not None
        plan, position = leg.plan, leg.position
        outcome = await by_name[plan.send_to[position]].send_on_loop(plan.batch)
        leg = await on_sender(partial(on_thread, plan=plan, position=position + 1, outcome=outcome))
    return leg.sent, leg.next_at


class TracedChannel:
    """A channel whose every send is a `send {channel}` span (the current span while it sends: an HTTP channel
    carries its traceparent), counted by channel and outcome, and told as a ChannelOutcome, never raised."""

    def __init__(self, channel: OutboxChannel) -> None:
        self.channel = channel
        self.name = channel.name
        self.at_most_once = channel.at_most_once
        self.on_loop = inspect.iscoroutinefunction(channel.send)

    def send_blocking(self, batch: Batch) -> ChannelOutcome:
        if getattr(self.channel, "reaches_others", False):
            # A channel that reaches others (HTTP, apprise) never carries an owner-only message (what a run that
            # read untrusted content and private data wrote): it is the owner's direct channels' alone.
            batch = batch.for_others()
            if not batch.bodies:
                return ChannelOutcome(self.name)
        try:
            with self._span(batch):  # the span records a failure, as the exception passes through it
                self.channel.send(batch)
        except Exception as exc:  # a channel's own failure must not lose the batch
            return self._counted(ChannelOutcome.failed(self.name, exc), batch)
        return self._counted(ChannelOutcome(self.name), batch)

    async def send_on_loop(self, batch: Batch) -> ChannelOutcome:
        try:
            with self._span(batch):
                await cast(Awaitable[None], self.channel.send(batch))
        except Exception as exc:  # a channel's own failure must not lose the batch
            return self._counted(ChannelOutcome.failed(self.name, exc), batch)
        return self._counted(ChannelOutcome(self.name), batch)

    def _span(self, batch: Batch) -> AbstractContextManager[telemetry.Span]:
        return telemetry.service_span(f"send {self.name}", {
            "agent_console.outbox.channel": self.name, "agent_console.outbox.batch": batch.key,
            "agent_console.outbox.messages": len(batch.bodies), "agent_console.outbox.urgent": batch.urgent,
            "agent_console.outbox.attempt": batch.attempt,
        }, kind="CLIENT")

    def _counted(self, outcome: ChannelOutcome, batch: Batch) -> ChannelOutcome:
        labels = {"agent_console.outbox.channel": self.name}
        telemetry.count("agent_console.outbox.sends", "{send}", "Outbox sends by channel and outcome",
                        {**labels, "agent_console.outbox.outcome": "sent" if outcome.error is None else "failed"})
        if outcome.error is None:
            telemetry.count("agent_console.outbox.messages", "{message}", "Messages handed to a channel",
                            labels, len(batch.bodies))
        return outcome
