"""Maintenance: keep the WAL small once readers let go, and, when `retain_days` is set, prune old
finished work once a day (see Store.prune)."""

from __future__ import annotations

import logging

from console.core.db import WAL_SIZE_LIMIT
from console.core.retention import PruneReport
from console.runtime.host import ServiceHost, service_loop

log = logging.getLogger("agent_console.maintenance")

DAY = 86_400


class Maintenance:
    def __init__(self, host: ServiceHost) -> None:
        self.host = host
        self.passes = 0  # loop passes, so a test can wait for the service to have looked
        self.last_report: PruneReport | None = None
        self._next_prune_at: int | None = None  # None: prune on the first pass as the lease holder

    async def run(self) -> None:
        await service_loop(self.host, "maintenance", self._tick)  # a failed prune is retried tomorrow

    async def _tick(self) -> float:
        try:
            await self._shrink_wal()
            await self._prune()
        finally:
            self.passes += 1
        return self.host.idle_cap

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
