"""The scheduler: turns due timers into inbox events. It never starts a run itself."""

from __future__ import annotations

import logging

from console import telemetry
from console.runtime.host import ServiceHost, service_loop

log = logging.getLogger("agent_console.scheduler")


class Scheduler:
    def __init__(self, host: ServiceHost) -> None:
        self.host = host

    async def run(self) -> None:
        await service_loop(self.host, "scheduler", self._tick)

    async def _tick(self) -> float:
        host = self.host
        if host.mode != "active":  # the lease holder's engine schedules; keys make a double pass harmless
            return host.idle_cap
        now = host.clock.now()
        due = await host.read(lambda store: store.next_timer())
        fired = 0
        if due is not None and due.due <= now:
            # The span is open while the timers fire, so the events they store keep its context: the runs that
            # take them link to it.
            with telemetry.service_span("fire timers", {}) as span:
                kept = telemetry.context_to_keep(parent=False)
                fired = await host.on("writer", lambda store: store.run_scheduler(now=now, trace=kept))
                span.set("agent_console.timers.fired", fired)
        if fired:
            telemetry.count("agent_console.timers.fired", "{timer}", "Timer firings stored as events", {}, fired)
            log.info("%s timer(s) fired", fired)
            host.publish("timers", f"{fired} fired")
            host.publish("events", "timer events")
            host.wake()
        notice = await host.read(lambda store: store.next_expiry_notice())
        if notice is not None and notice <= now:  # a schedule expires within a day: the owner is told, once
            zone = host.settings.timezone
            if await host.on("writer", lambda store: store.tell_expiring_schedules(now=now, zone=zone)):
                host.publish("outbox", "a schedule expires soon")
                host.wake()
            notice = await host.read(lambda store: store.next_expiry_notice())
        upcoming = await host.read(lambda store: store.next_timer())
        moments = [moment for moment in (None if upcoming is None else upcoming.due, notice) if moment is not None]
        return host.seconds_until(min(moments) if moments else None)
