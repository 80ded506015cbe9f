"""Read-only summaries the runtime and the agents need: the daily digest and the next retry time."""

from __future__ import annotations

from typing import Any

from console.core.base import StoreBase
from console.core.statements import NOT_FRESH


class InsightsMixin(StoreBase):
    def next_retry_at(self) -> int | None:
        """When the earliest waiting retry becomes claimable (None if no retry is waiting)."""
        value = self._scalar(
            "SELECT MIN(next_attempt_at) FROM inbox INDEXED BY inbox_retry WHERE status = 'pending' AND attempts > 0"
        )
        return None if value is None else int(value)

    def digest(self, *, since: int, now: int, exclude_source_id_prefix: str | None = None) -> dict[str, Any]:
        """What happened between since and now: events by state, dead events with reasons, expired
        approvals. Runs once a day, so a scan of the day's rows is acceptable here."""
        prefix = exclude_source_id_prefix
        by_state = {
            status: n
            for status, n in self._conn.execute(
                """SELECT status, COUNT(*) FROM inbox
                   WHERE created_at >= ? AND created_at <= ? AND NOT (source = 'timer' AND ? IS NOT NULL
                         AND substr(source_id, 1, length(?)) = ?)
                   GROUP BY status""",
                (since, now, prefix, prefix, prefix),
            )
        }
        dead = [
            {"id": event_id, "source": source, "source_id": source_id, "error": error}
            for event_id, source, source_id, error in self._conn.execute(
                f"""SELECT id, source, source_id, error FROM inbox INDEXED BY inbox_status_id
                    WHERE status = 'dead' AND {NOT_FRESH} AND updated_at >= ? ORDER BY id""",
                (since,),
            )
        ]
        expired = [
            {"request_id": request_id, "action": action}
            for request_id, action in self._conn.execute(
                """SELECT request_id, action FROM approvals INDEXED BY approvals_resolved
                   WHERE outcome = 'expired' AND resolved_at >= ? ORDER BY resolved_at""",
                (since,),
            )
        ]
        return {"since": since, "now": now, "events": by_state, "dead": dead, "expired_approvals": expired}
