"""Each MCP server's health, as the engine holding the lease sees it (status --json "tools", the console).

The MCP hub lives inside the engine's process; nothing else could tell that a server is down. The engine
records a server's state only when it changes, fenced by its holder and generation like its other writes,
so a stale engine cannot overwrite what the live one saw.
"""

from __future__ import annotations

from typing import Any

from console.core.base import StoreBase

TOOL_STATES = ("up", "down", "starting")


class ToolHealthMixin(StoreBase):
    def set_tool_health(self, holder: str, gen: int, server: str, state: str, reason: str | None, *,
                        now: int) -> bool:
        """Record server's state if holder holds the lease in generation gen; False when refused. A write of
        the state and reason already stored changes nothing (since keeps when the state began)."""
        if state not in TOOL_STATES:
            raise ValueError(f"tool state must be one of {', '.join(TOOL_STATES)}, not {state!r}")
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            before = self._conn.execute("SELECT state, reason, since FROM tool_health WHERE server = ?",
                                        (server,)).fetchall()
            if before and (before[0][0], before[0][1]) == (state, reason):
                return True
            since = before[0][2] if before and before[0][0] == state else now
            self._conn.execute("""INSERT INTO tool_health (server, state, reason, since) VALUES (?, ?, ?, ?)
                                  ON CONFLICT (server) DO UPDATE SET state = excluded.state,
                                  reason = excluded.reason, since = excluded.since""",
                               (server, state, reason, since))
            return True

    def tool_health(self) -> list[dict[str, Any]]:
        """status --json's "tools" (contract: server, state, reason), by server name."""
        return [{"server": server, "state": state, "reason": reason, "since": since}
                for server, state, reason, since in self._conn.execute(
                    "SELECT server, state, reason, since FROM tool_health ORDER BY server")]
