"""Maintenance: keep the WAL small once readers let go, and, when `retain_days` is set, prune old
finished work once a day (see Store.prune); with telemetry on, the inbox's gauges every 30 s."""

from __future__ import annotations

import logging
import time

from console import telemetry
from console.core import Store
from console.core.backend import WAL_SIZE_LIMIT
from console.core.retention import PruneReport
from console.runtime.host import ServiceHost, service_loop

log = logging.getLogger("agent_console.maintenance")

DAY = 86_400
OBSERVE_EVERY = 30.0  # seconds between two readings of the inbox's gauges (telemetry on only)


class Maintenance:
    def __init__(self, host: ServiceHost) -> None:
        self.host = host
        self.passes = 0  # loop passes, so a test can wait for the service to have looked
        self.last_report: PruneReport | None = None
        self._next_observe = 0.0
        self._next_prune_at: int | None = None  # None: prune on the first pass as the lease holder

    async def run(self) -> None:
        await service_loop(self.host, "maintenance", self._tick)  # a failed prune is retried tomorrow

    async def _tick(self) -> float:
        try:
            await self._shrink_wal()
            await self._prune()
            await self._observe()
        finally:
            self.passes += 1
        return self.host.idle_cap

    async def _observe(self) -> None:
        """The inbox's state as gauges, for the telemetry's metrics: events by state, the outbox's lag (the age of
        its oldest waiting message), lease takeovers and refused finishes so far. Read only while telemetry is
        on, at most every OBSERVE_EVERY seconds."""
        if not telemetry.enabled() or time.monotonic() < self._next_observe:
            return
        self._next_observe = time.monotonic() + OBSERVE_EVERY
        host = self.host
        now = host.clock.now()

        def read(store: Store) -> tuple[dict[str, int], int | None, int, int]:
            return store.counts(), store.oldest_queued_at(), store.takeover_count(), store.refused_finish_count()

        counts, oldest, takeovers, refused = await host.read(read)
        for state, number in counts.items():
            telemetry.gauge("agent_console.events", "{event}", "Events in the inbox by state", number,
                            {"agent_console.event.state": state})
        telemetry.gauge("agent_console.outbox.lag", "s", "Age of the oldest message waiting to be sent",
                        0 if oldest is None else max(0, now - oldest), {})
        telemetry.gauge("agent_console.lease.takeovers", "{takeover}", "Lease takeovers recorded in the inbox",
                        takeovers, {})
        telemetry.gauge("agent_console.refused_finishes", "{finish}", "Late finishes the lease fence refused",
                        refused, {})

    async def _shrink_wal(self) -> None:
        """A long reader makes the WAL grow while it reads; the next commits cut it back to the limit
        (journal_size_limit), but a quiet inbox may see none for hours. Any engine, active or standby,
        truncates it once the readers have let go (a try never waits for them)."""
        host = self.host
        if await host.on("maintenance", lambda store: store.wal_bytes() > WAL_SIZE_LIMIT and store.shrink_wal()):
            log.info("truncated the WAL, which a long reader had left above %s MiB", WAL_SIZE_LIMIT // 2**20)

    async def _prune(self) -> None:
        host = self.host
        days = host.settings.retain_days
        # Only the lease holder prunes, so two engines on one file do not both walk it.
        if not days or host.mode != "active":
            return
        now = host.clock.now()
        if self._next_prune_at is not None and now < self._next_prune_at:
            return
        self._next_prune_at = now + DAY
        # Its own connection and thread: a first prune of a large inbox takes seconds, and ingests,
        # claims and sends must not queue behind it (it commits in short transactions).
        report = await host.on("maintenance", lambda store: store.prune(older_than=days * DAY, now=now))
        self.last_report = report
        if report.payloads_cleared or report.messages_deleted or report.steps_deleted or report.sessions_deleted:
            log.info("pruned work older than %s days: %s payloads, %s messages, %s journal steps, %s sessions",
                     days, report.payloads_cleared, report.messages_deleted, report.steps_deleted,
                     report.sessions_deleted)
            host.publish("events", "pruned")
            host.publish("outbox", "pruned")
