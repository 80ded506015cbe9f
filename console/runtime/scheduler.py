"""The scheduler: turns due timers into inbox events. It never starts a run itself."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from console.runtime.engine import Engine

log = logging.getLogger("agent_console.scheduler")


class Scheduler:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def run(self) -> None:
        engine = self.engine
        wake = engine.wake_event()
        while not engine.stopping:
            idle_for = engine.idle_cap
            try:
                idle_for = await self._tick()
            except Exception as exc:
                engine.note_error(f"scheduler: {type(exc).__name__}: {exc}")
            await engine.sleep(wake, idle_for)

    async def _tick(self) -> float:
        engine = self.engine
        if engine.mode != "active":  # the lease holder's engine schedules; keys make a double pass harmless
            return engine.idle_cap
        now = engine.clock.now()
        fired = await engine.on("writer", lambda store: store.run_scheduler(now=now))
        if fired:
            log.info("%s timer(s) fired", fired)
            engine.publish("timers", f"{fired} fired")
            engine.publish("events", "timer events")
            engine.wake()
        upcoming = await engine.read(lambda store: store.next_timer())
        return engine.seconds_until(None if upcoming is None else upcoming.due)
