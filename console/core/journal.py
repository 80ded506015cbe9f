"""The step journal (seed 003): a side effect runs once per key across retries and takeovers.

claim -> execute -> commit. A committed key returns its stored result (`skipped`). A claim left by
a worker of an older lease generation is taken over (that worker is dead or fenced), never waited
on forever. Claim and commit are both fenced by the lease: a stale caller learns it is stale
(StaleGeneration) and its result never replaces the committed one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from console.core.base import StaleGeneration, StoreBase, dumps, loads
from console.core.db import transaction, translate_errors
from console.core.models import JournalStep

_COLUMNS = "idem_key, state, gen, event_id, claimed_at, committed_at, result, executions"


def _step(row: tuple[Any, ...]) -> JournalStep:
    key, state, gen, event_id, claimed_at, committed_at, result, executions = row
    return JournalStep(key, state, gen, event_id, claimed_at, committed_at, loads(result), executions)


class JournalMixin(StoreBase):
    def run_once(
        self,
        idem_key: str,
        fn: Callable[[], Any],
        *,
        gen: int,
        now: int,
        event_id: int | None = None,
        holder: str | None = None,
    ) -> tuple[Any, str]:
        """Run fn once for idem_key, under the lease (holder, gen). Returns (result, 'executed') or
        (the committed result, 'skipped').

        Fenced twice, each time in the transaction that writes: claiming the key needs the live lease,
        and committing the result needs that no newer generation exists (the lease may have lapsed
        meanwhile: nobody else can have run the step, and recording the effect is what stops a repeat).
        Either refusal is recorded and raises StaleGeneration; the caller's result is then never
        stored, and what any later run sees is the committed result of the generation that holds the
        lease. holder None checks the generation alone.

        fn's result should be JSON-serialisable (it is what a resumed run reads back); anything else is
        committed as {"unserialisable_result": repr}, because the effect has happened and must not be
        repeated. If fn raises, the claim is dropped so a retry may run it again.
        """
        events = [] if event_id is None else [event_id]
        refused: str | None = None
        with translate_errors(), transaction(self._conn):
            if not self._holds(holder, gen, now):
                refused = self._record_fenced("step", holder, gen, now, events, idem_key)
            else:
                row = self._conn.execute(
                    "SELECT state, gen, result FROM journal WHERE idem_key = ?", (idem_key,)
                ).fetchall()
                if row and row[0][0] == "committed":
                    return loads(row[0][2]), "skipped"
                if row:  # claimed by an older (dead or fenced) generation, or by an earlier try of ours
                    self._conn.execute(
                        "UPDATE journal SET gen = ?, claimed_at = ?, executions = executions + 1 WHERE idem_key = ?",
                        (gen, now, idem_key),
                    )
                else:
                    self._conn.execute(
                        """INSERT INTO journal (idem_key, state, gen, event_id, claimed_at)
                           VALUES (?, 'claimed', ?, ?, ?)""",
                        (idem_key, gen, event_id, now),
                    )
        if refused is not None:
            raise StaleGeneration(f"step {idem_key!r} refused to generation {gen}: {refused}")
        try:
            result = fn()
        except BaseException:
            with translate_errors(), transaction(self._conn):
                self._conn.execute(
                    "DELETE FROM journal WHERE idem_key = ? AND state = 'claimed' AND gen = ?", (idem_key, gen)
                )
            raise
        try:
            text = dumps(result)
        except (TypeError, ValueError):
            # The effect has happened: record it anyway (as its repr) so that no retry repeats it.
            text = dumps({"unserialisable_result": repr(result)[:1000]})
        with translate_errors(), transaction(self._conn):
            committed = self._holds_generation(holder, gen) and self._conn.execute(
                """UPDATE journal SET state = 'committed', result = ?, committed_at = ?
                   WHERE idem_key = ? AND state = 'claimed' AND gen = ? RETURNING idem_key""",
                (text, now, idem_key, gen),
            ).fetchall()
            if not committed:
                refused = self._record_fenced("commit", holder, gen, now, events, idem_key)
        if refused is not None:
            raise StaleGeneration(f"the result of step {idem_key!r} refused to generation {gen}: {refused}")
        return result, "executed"

    def journal_step(self, idem_key: str) -> JournalStep | None:
        for row in self._conn.execute(f"SELECT {_COLUMNS} FROM journal WHERE idem_key = ?", (idem_key,)):
            return _step(row)
        return None

    def journal_steps(self, event_id: int) -> list[JournalStep]:
        return [
            _step(r)
            for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM journal WHERE event_id = ? ORDER BY claimed_at, idem_key", (event_id,)
            )
        ]

    # --- sessions -----------------------------------------------------------------------------
    def save_session(self, session_id: str, state: Any, *, now: int) -> None:
        with translate_errors(), transaction(self._conn):
            self._conn.execute(
                """INSERT INTO sessions (session_id, state, updated_at) VALUES (?, ?, ?)
                   ON CONFLICT (session_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at""",
                (session_id, dumps(state), now),
            )

    def load_session(self, session_id: str) -> Any:
        """The saved state, or None for an unknown session."""
        return loads(self._scalar("SELECT state FROM sessions WHERE session_id = ?", (session_id,)))

    def delete_session(self, session_id: str) -> bool:
        with translate_errors(), transaction(self._conn):
            return bool(self._conn.execute(
                "DELETE FROM sessions WHERE session_id = ? RETURNING session_id", (session_id,)
            ).fetchall())
