"""The agent as a whole (ready, waiting, paused), and handing claimed events back unrun.

When the provider pushes back (a rate limit, an overload) or refuses the agent's configuration (a bad key,
an unknown model), the events are not at fault: they go back to pending with the claim's attempt taken
back, and the agent's state says why nothing runs. A run's events that did not fit one model call are
handed back the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.core.base import StoreBase, dumps, loads
from console.core.models import AGENT_STATES, AgentState

# A hand retry (retry_dead) and a poison event's batch-mate (`batch`: its run failed on another event) are
# claimed alone with no attempt counted; when such an event is handed back it must stay alone. Its history says
# so: the last entry that is neither a claim, a hand-back nor a model switch is the `retry` or the `batch`.
_LAST_DECISIVE_KIND = """SELECT kind FROM attempts
                         WHERE event_id = ? AND kind NOT IN ('claim', 'deferred', 'model')
                         ORDER BY id DESC LIMIT 1"""


class AgentStateMixin(StoreBase):
    def unclaim(self, holder: str, gen: int, ids: Sequence[int], *, now: int, reason: str) -> bool:
        """Hand events back unrun, in one fenced transaction: each one still running under (holder, gen)
        returns to pending with this claim's attempt taken back, and its history says `deferred` and why.

        Refused (False, recorded like a refused finish) unless holder holds the lease in generation gen;
        the next generation then recovers the events as it does any lost run's. Like a finish, it commits
        without waiting for an fsync: nothing in it has reached the outside world.
        """
        with self.write_transaction(relaxed=True):
            if not self._holds(holder, gen, now):
                self._refuse(holder, gen, ids, now)
                return False
            for event_id in ids:
                returned = self._conn.execute(
                    """UPDATE inbox SET status = 'pending', updated_at = ?,
                                       attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
                       WHERE id = ? AND status = 'running' AND claim_gen = ? RETURNING attempts""",
                    (now, event_id, gen),
                ).fetchall()
                if not returned:
                    continue
                if returned[0][0] == 0 and self._scalar(_LAST_DECISIVE_KIND, (event_id,)) in ("retry", "batch"):
                    self._conn.execute("UPDATE inbox SET claim_alone = 1 WHERE id = ?", (event_id,))
                self._log_attempt(event_id, now, "deferred", holder, gen, reason)
            return True

    def _refuse(self, holder: str, gen: int, ids: Sequence[int], now: int) -> None:
        lease = self._lease_row()
        reason = "lease expired" if lease and lease.holder == holder and lease.gen == gen else (
            "lease held by another generation")
        self._conn.execute(
            """INSERT INTO refused_finishes
               (at, holder, gen, event_ids, lease_holder, lease_gen, reason) VALUES (?, ?, ?, ?, ?, ?, ?)""",
            (now, holder, gen, dumps(list(ids)), lease.holder if lease else None,
             lease.gen if lease else None, reason),
        )
        for event_id in ids:
            self._log_attempt(event_id, now, "refused", holder, gen, reason)

    def agent_state(self) -> AgentState:
        """As stored; AgentState.at(now) is what it means now."""
        for state, reason, until, since, holder, gen, waits, notified, cause in self._conn.execute(
            "SELECT state, reason, until, since, holder, gen, waits, notified, cause FROM agent_state WHERE one = 1"
        ):
            return AgentState(state, reason, until, since, holder, gen, waits, notified, loads(cause))
        return AgentState("ready", None, None, 0)

    def pause_by_owner(self, *, now: int, via: str) -> bool:
        """The owner pauses the agent (a chat's /pause): nothing is claimed until they resume it, whichever
        engine holds the lease, a restart included. False when it was already paused by the owner."""
        with self.write_transaction():
            if self.agent_state().owner_paused:
                return False
            self._conn.execute(
                """UPDATE agent_state SET state = 'paused', reason = ?, until = NULL, since = ?, waits = 0,
                   cause = ? WHERE one = 1""",
                (f"paused by you ({via})", now, dumps({"owner": True, "via": via})),
            )
            return True

    def resume_by_owner(self, *, now: int) -> bool:
        """Undo the owner's pause (False when the agent was not paused by the owner: any other pause stands)."""
        with self.write_transaction():
            if not self.agent_state().owner_paused:
                return False
            self._conn.execute("""UPDATE agent_state SET state = 'ready', reason = NULL, until = NULL, since = ?,
                                  cause = NULL WHERE one = 1""", (now,))
            return True

    def set_agent_state(
        self,
        holder: str,
        gen: int,
        state: str,
        *,
        now: int,
        reason: str | None = None,
        until: int | None = None,
        notice: str | None = None,
        notice_key: str | None = None,
        worked: bool = False,
        cause: Any = None,
    ) -> bool:
        """Set the agent's state, if holder holds the lease in generation gen (False otherwise).

        `waits` counts back-to-back waits. A pause with a notice queues it as one urgent message, unless
        the owner was already told about the same notice_key (the same failing configuration): a restart
        that fails again the same way does not tell twice. `worked` (the provider took a request) forgets
        that, so the same configuration failing later, a revoked key say, is news again.

        `until` is when a wait ends, or when a pause lifts on its own (a budget's period rolls over; None:
        not before a restart). `cause` (JSON) says what else lifts a pause: see AgentState.cause.
        """
        if state not in AGENT_STATES:
            raise ValueError(f"unknown agent state {state!r}; expected one of {', '.join(AGENT_STATES)}")
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            before = self.agent_state()
            waits = before.waits + 1 if state == "waiting" and before.state == "waiting" else (
                1 if state == "waiting" else 0)
            notified = None if worked else before.notified
            if state == "paused" and notice and notice.strip() and notice_key != before.notified:
                self._write_outbox(notice, urgent=True, now=now, event_id=None)
                notified = notice_key
            since = before.since if state == before.state else now
            self._conn.execute(
                """UPDATE agent_state SET state = ?, reason = ?, until = ?, since = ?, holder = ?, gen = ?, waits = ?,
                   notified = ?, cause = ? WHERE one = 1""",
                (state, reason, until if state in ("waiting", "paused") else None, since, holder, gen, waits, notified,
                 None if cause is None or state != "paused" else dumps(cause)),
            )
            return True
