"""The step journal (seed 003): a side effect runs once per key across retries and takeovers.

claim -> execute -> commit. A committed key returns its stored result (`skipped`). A claim left by
a worker of an older lease generation is taken over (that worker is dead or fenced), never waited
on forever. Claim and commit are both fenced by the lease: a stale caller learns it is stale
(StaleGeneration) and its result never replaces the committed one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from console.core.base import OutcomeUnknown, StaleGeneration, StoreBase, dumps, loads
from console.core.models import JournalStep

_COLUMNS = "idem_key, state, gen, event_id, claimed_at, committed_at, result, executions"


def _step(row: tuple[Any, ...]) -> JournalStep:
    key, state, gen, event_id, claimed_at, committed_at, result, executions = row
    return JournalStep(key, state, gen, event_id, claimed_at, committed_at, loads(result), executions)


Interrupted = Literal["redo", "unknown"]


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
        interrupted: Interrupted = "redo",
        aliases: Sequence[tuple[str, int | None]] = (),
        clock: Callable[[], int] | None = None,
    ) -> tuple[Any, str]:
        """Run fn once for idem_key, under the lease (holder, gen). Returns (result, 'executed') or
        (the committed result, 'skipped'). `clock` is read again once fn has returned: the step's commit time
        (without it, `now`), so that the journal says how long a step took (a run's timeline).

        Fenced twice, each time in the transaction that writes: claiming the key needs the live lease,
        and committing the result needs that no newer generation exists (the lease may have lapsed
        meanwhile: nobody else can have run the step, and recording the effect is what stops a repeat).
        Either refusal is recorded and raises StaleGeneration; the caller's result is then never
        stored, and what any later run sees is the committed result of the generation that holds the
        lease. holder None checks the generation alone.

        fn's result should be JSON-serialisable (it is what a resumed run reads back); anything else is
        committed as {"unserialisable_result": repr}, because the effect has happened and must not be
        repeated. If fn raises, the claim is dropped so a retry may run it again; if it raises
        OutcomeUnknown (its call was sent and no answer came), the step is kept `unknown` instead.

        A step found claimed and never committed (its run died or was fenced mid-step), or kept unknown, is
        run again under the same key when interrupted is "redo" (a model turn, a checkpoint, a call the other
        side de-duplicates by key); with "unknown" (a world-changing call that must not happen twice) it is
        recorded unknown and OutcomeUnknown is raised: the caller's owner decides.

        aliases are more (key, event) pairs that name the same step: a call made for several events at once
        is found done, or unknown, from any of them. They are claimed and settled with idem_key; the result is
        stored once, under idem_key, and an alias row points at it.
        """
        keys = [(idem_key, event_id), *((key, event) for key, event in aliases if key != idem_key)]
        names = [key for key, _event in keys]
        marks = ", ".join("?" for _ in names)
        events = sorted({event for _key, event in keys if event is not None})
        refused: str | None = None
        unknown: str | None = None
        with self.write_transaction():
            if not self._holds(holder, gen, now):
                refused = self._record_fenced("step", holder, gen, now, events, idem_key)
            else:
                rows = {key: (state, result) for key, state, result in self._conn.execute(
                    f"SELECT idem_key, state, result FROM journal WHERE idem_key IN ({marks})", names)}
                for key in names:
                    state, result = rows.get(key, (None, None))
                    if state == "committed":
                        return self._stored_result(loads(result)), "skipped"
                for key in names:
                    state, result = rows.get(key, (None, None))
                    if state == "unknown":
                        unknown = str((loads(result) or {}).get("outcome_unknown") or "its outcome is unknown")
                        break
                    if state == "claimed":  # by a run that died or was fenced mid-step, or by an earlier try
                        unknown = "the run that made the call stopped before its answer was recorded"
                if unknown is not None and interrupted == "unknown":
                    self._settle_unknown(keys, gen, now, unknown)
                else:
                    unknown = None
                    for key, event in keys:
                        self._conn.execute(
                            """INSERT INTO journal (idem_key, state, gen, event_id, claimed_at)
                               VALUES (?, 'claimed', ?, ?, ?)
                               ON CONFLICT (idem_key) DO UPDATE SET state = 'claimed', gen = excluded.gen,
                                   claimed_at = excluded.claimed_at, result = NULL,
                                   executions = journal.executions + 1""",
                            (key, gen, event, now),
                        )
        if refused is not None:
            raise StaleGeneration(f"step {idem_key!r} refused to generation {gen}: {refused}")
        if unknown is not None:
            raise OutcomeUnknown(unknown)
        try:
            result = fn()
        except OutcomeUnknown as exc:
            # The call went out and no answer came: keep the step, unknown, so that no retry repeats it unasked.
            # Fenced like a commit: a newer generation finds the claim and reaches the same verdict itself.
            with self.write_transaction():
                if self._holds_generation(holder, gen):
                    self._settle_unknown(keys, gen, now, str(exc) or "its outcome is unknown", only_claimed=True)
            raise
        except BaseException:
            with self.write_transaction():
                self._conn.execute(
                    f"DELETE FROM journal WHERE idem_key IN ({marks}) AND state = 'claimed' AND gen = ?",
                    (*names, gen),
                )
            raise
        try:
            text = dumps(result)
        except (TypeError, ValueError):
            # The effect has happened: record it anyway (as its repr) so that no retry repeats it.
            text = dumps({"unserialisable_result": repr(result)[:1000]})
        pointer = dumps({"same_as": idem_key})
        done_at = now if clock is None else max(now, clock())
        with self.write_transaction():
            committed = self._holds_generation(holder, gen) and all(
                self._conn.execute(
                    """UPDATE journal SET state = 'committed', result = ?, committed_at = ?
                       WHERE idem_key = ? AND state = 'claimed' AND gen = ? RETURNING idem_key""",
                    (text if key == idem_key else pointer, done_at, key, gen),
                ).fetchall()
                for key in names
            )
            if not committed:
                refused = self._record_fenced("commit", holder, gen, done_at, events, idem_key)
        if refused is not None:
            raise StaleGeneration(f"the result of step {idem_key!r} refused to generation {gen}: {refused}")
        return result, "executed"

    def _settle_unknown(
        self, keys: Sequence[tuple[str, int | None]], gen: int, now: int, why: str, *, only_claimed: bool = False
    ) -> None:
        """Keep each key's step `unknown` with the reason (inside the caller's transaction)."""
        reason = dumps({"outcome_unknown": why})
        for key, event in keys:
            if only_claimed:
                self._conn.execute(
                    "UPDATE journal SET state = 'unknown', result = ? WHERE idem_key = ? AND state = 'claimed' "
                    "AND gen = ?", (reason, key, gen))
            else:
                self._conn.execute(
                    """INSERT INTO journal (idem_key, state, gen, event_id, claimed_at, result)
                       VALUES (?, 'unknown', ?, ?, ?, ?)
                       ON CONFLICT (idem_key) DO UPDATE SET state = 'unknown', result = excluded.result""",
                    (key, gen, event, now, reason),
                )

    def _stored_result(self, result: Any) -> Any:
        """A committed result, following an alias to the step that holds it (None if that one was pruned)."""
        if isinstance(result, dict) and set(result) == {"same_as"}:
            return loads(self._scalar("SELECT result FROM journal WHERE idem_key = ? AND state = 'committed'",
                                      (str(result["same_as"]),)))
        return result

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
        with self.write_transaction():
            self._write_session(session_id, state, now)

    def _write_session(self, session_id: str, state: Any, now: int) -> None:
        """The one writer of a saved session (inside the caller's transaction)."""
        self._conn.execute(
            """INSERT INTO sessions (session_id, state, updated_at) VALUES (?, ?, ?)
               ON CONFLICT (session_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at""",
            (session_id, dumps(state), now),
        )

    def load_session(self, session_id: str) -> Any:
        """The saved state, or None for an unknown session."""
        return loads(self._scalar("SELECT state FROM sessions WHERE session_id = ?", (session_id,)))

    def delete_session(self, session_id: str) -> bool:
        with self.write_transaction():
            return bool(self._conn.execute(
                "DELETE FROM sessions WHERE session_id = ? RETURNING session_id", (session_id,)
            ).fetchall())
