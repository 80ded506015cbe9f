"""Each MCP server's health, as the engine holding the lease sees it (status --json "tools", the console).

The MCP hub lives inside the engine's process; nothing else could tell that a server is down. The engine
records a server's state only when it changes, fenced by its holder and generation like its other writes,
so a stale engine cannot overwrite what the live one saw.
"""

from __future__ import annotations

import json
from typing import Any

from console.core.base import StoreBase, loads

TOOL_STATES = ("up", "down", "starting")
SANDBOX_STATES = ("on", "off", "remote")


class ToolHealthMixin(StoreBase):
    def set_tool_health(self, holder: str, gen: int, server: str, state: str, reason: str | None, *,
                        now: int, sandbox: str | None = None, refused: dict[str, int] | None = None) -> bool:
        """Record server's state if holder holds the lease in generation gen; False when refused. A write of
        the state and reason already stored changes nothing (since keeps when the state began).

        sandbox: "on", "off" or "remote" (SANDBOX_STATES), None to keep what is stored. refused: connections its
        egress proxy refused since the last write, by host:port: added to the stored counts and written to the
        audit trail in the same transaction."""
        if state not in TOOL_STATES:
            raise ValueError(f"tool state must be one of {', '.join(TOOL_STATES)}, not {state!r}")
        if sandbox is not None and sandbox not in SANDBOX_STATES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_STATES)}, not {sandbox!r}")
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            before = self._conn.execute(
                "SELECT state, reason, since, sandbox, refused_hosts FROM tool_health WHERE server = ?",
                (server,)).fetchall()
            stored = _counts(loads(before[0][4])) if before else {}
            grown = {host: more for host, more in (refused or {}).items() if more > 0}
            counts = {**stored, **{host: stored.get(host, 0) + more for host, more in grown.items()}}
            box = sandbox if sandbox is not None else (before[0][3] if before else None)
            if before and (before[0][0], before[0][1], before[0][3]) == (state, reason, box) and not grown:
                return True
            since = before[0][2] if before and before[0][0] == state else now
            self._conn.execute("""INSERT INTO tool_health (server, state, reason, since, sandbox, refused_hosts)
                                  VALUES (?, ?, ?, ?, ?, ?)
                                  ON CONFLICT (server) DO UPDATE SET state = excluded.state,
                                  reason = excluded.reason, since = excluded.since, sandbox = excluded.sandbox,
                                  refused_hosts = excluded.refused_hosts""",
                               (server, state, reason, since, box, json.dumps(counts, sort_keys=True)))
            if grown:
                self._audit_egress(server, grown, now)
            return True

    def tool_health(self) -> list[dict[str, Any]]:
        """status --json's "tools" (contract: server, state, reason, sandbox, refused_hosts), by server name.
        refused_hosts: [{"host": "host:port", "count": N}], the most refused first."""
        rows = self._conn.execute(
            "SELECT server, state, reason, since, sandbox, refused_hosts FROM tool_health ORDER BY server")
        return [{"server": server, "state": state, "reason": reason, "since": since, "sandbox": sandbox,
                 "refused_hosts": [{"host": host, "count": n} for host, n in
                                   sorted(_counts(loads(refused)).items(), key=lambda item: (-item[1], item[0]))]}
                for server, state, reason, since, sandbox, refused in rows]


def sandbox_words(tool: dict[str, Any]) -> list[str]:
    """What a server's sandbox has to say: it runs bare, or its egress proxy refused hosts (the first three)."""
    said = [f"{tool['server']} runs bare (sandbox = false)"] if tool.get("sandbox") == "off" else []
    refused = tool.get("refused_hosts") or []
    if refused:
        total = sum(int(host["count"]) for host in refused)
        hosts = ", ".join(host["host"] for host in refused[:3]) + (", …" if len(refused) > 3 else "")
        said.append(f"{tool['server']} refused {total} connection{'' if total == 1 else 's'}: {hosts}")
    return said


def _counts(value: Any) -> dict[str, int]:
    return {str(host): int(n) for host, n in value.items()} if isinstance(value, dict) else {}
