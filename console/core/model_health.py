"""Each model of the chain as the runs found it (status --json "models", the console, `agent-console models`).

A row per model and credential: `cooling` until a time (back-pressure, a spent quota), `paused` (the provider
refused its key or model: until the engine restarts), or `ready`. The chain (console/agents/chain.py) reads
them before each turn and writes them when a model fails or answers again, fenced by the lease holder and
generation like every other write of a run; kept in the inbox, so a cooldown survives a restart or a takeover.
The owner's notice about a failing model and the announcement that a fallback answered are written in the
same transaction as the row that says they were sent, so neither is sent twice nor lost.
"""

from __future__ import annotations

from typing import Any

from console.core.base import StoreBase

MODEL_STATES = ("ready", "cooling", "paused")
_COLUMNS = "credential, name, state, until, reason, failing_since, notified, announced_at, holder, gen, updated_at"


class ModelHealthMixin(StoreBase):
    def model_health(self) -> list[dict[str, Any]]:
        """Every stored row, by name then newest first."""
        names = _COLUMNS.split(", ")
        return [dict(zip(names, row, strict=True)) for row in self._conn.execute(
            f"SELECT {_COLUMNS} FROM model_health ORDER BY name, updated_at DESC, credential")]

    def set_model_health(
        self, holder: str, gen: int, credential: str, name: str, state: str, *, now: int, until: int | None = None,
        reason: str | None = None, failing_since: int | None = None, notice: str | None = None,
        notice_key: str | None = None,
    ) -> bool:
        """Record a model's state if holder holds the lease in generation gen (False otherwise). A notice is
        queued as one urgent message unless the owner was already told under the same notice_key."""
        if state not in MODEL_STATES:
            raise ValueError(f"model state must be one of {', '.join(MODEL_STATES)}, not {state!r}")
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            before = self._model_row(credential)
            notified = before.get("notified") if before else None
            if notice and notice.strip() and notice_key is not None and notice_key != notified:
                self._write_outbox(notice, urgent=True, now=now, event_id=None)
                notified = notice_key
            self._conn.execute(
                """INSERT INTO model_health (credential, name, state, until, reason, failing_since, notified,
                                             announced_at, holder, gen, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (credential) DO UPDATE SET name = excluded.name, state = excluded.state,
                       until = excluded.until, reason = excluded.reason, failing_since = excluded.failing_since,
                       notified = excluded.notified, holder = excluded.holder, gen = excluded.gen,
                       updated_at = excluded.updated_at""",
                (credential, name, state, until, reason, failing_since, notified,
                 before.get("announced_at") if before else None, holder, gen, now))
            return True

    def model_answered(self, holder: str, gen: int, credential: str, name: str, *, now: int) -> bool:
        """The model answered: it is ready, its failing streak is over, and a later failure is news again.
        Writes nothing when that is already so. False when the lease is not held."""
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            before = self._model_row(credential)
            if before is None or (before["state"] == "ready" and before["failing_since"] is None
                                  and before["notified"] is None):
                return True
            self._conn.execute(
                """UPDATE model_health SET state = 'ready', until = NULL, reason = NULL, failing_since = NULL,
                   notified = NULL, holder = ?, gen = ?, updated_at = ? WHERE credential = ?""",
                (holder, gen, now, credential))
            return True

    def announce_model(self, holder: str, gen: int, credential: str, name: str, body: str, *, now: int,
                       every: int) -> bool:
        """Queue `body` for the owner unless this model was announced less than `every` seconds ago; True when
        it was queued. Fenced like the rest."""
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                return False
            before = self._model_row(credential)
            last = before.get("announced_at") if before else None
            if last is not None and now - int(last) < every:
                return False
            self._write_outbox(body, urgent=False, now=now, event_id=None)
            if before is None:
                self._conn.execute(
                    """INSERT INTO model_health (credential, name, state, announced_at, holder, gen, updated_at)
                       VALUES (?, ?, 'ready', ?, ?, ?, ?)""", (credential, name, now, holder, gen, now))
            else:
                self._conn.execute("UPDATE model_health SET announced_at = ? WHERE credential = ?", (now, credential))
            return True

    def note_model_switch(self, holder: str, gen: int, event_id: int, detail: str, *, now: int) -> bool:
        """A line in the event's history (kind `model`): the run's next turn goes to another model than its last
        turn's (or than the primary). Fenced like the rest; False when the lease is not held."""
        with self.write_transaction(relaxed=True):
            if not self._holds(holder, gen, now):
                return False
            self._log_attempt(event_id, now, "model", holder, gen, detail)
            return True

    def _model_row(self, credential: str) -> dict[str, Any] | None:
        names = _COLUMNS.split(", ")
        for row in self._conn.execute(f"SELECT {_COLUMNS} FROM model_health WHERE credential = ?", (credential,)):
            return dict(zip(names, row, strict=True))
        return None
