"""Answers whose resume cannot run: an owner's yes is never lost silently.

An approval's outcome reaches the conversation that asked as an event (source `approval`, source id = the
request id), and on yes that event's run performs the approved call (a journal step keyed by the request id).
Crashes or failures can spend the event's attempts and park it dead; the call then has not happened (or its
report has not), and nobody would know. So the transaction that parks such an event dead also queues a message
telling the owner what became of the call (urgent on a yes), and readers list these answers until a retry by
hand brings the event back (the same journal step: a retry runs the call once) or the owner discards it.
"""

from __future__ import annotations

from typing import Any

from console.core.base import StoreBase
from console.core.models import StrandedAnswer

# The journal key of the call an approval stands for: the step that runs it, once, on yes.
APPROVED_STEP_PREFIX = "tool:"

# A dead approval event, the approval it answers and the approved call's journal step. Dead events are read by
# the (status, id) index, so the cost follows the dead events, not the inbox.
_SELECT_STRANDED = f"""
    SELECT i.id, i.source_id, i.dead_reason, i.attempts, i.error, i.updated_at,
           a.outcome, a.action, a.tool, a.event_id, j.state
    FROM inbox i JOIN approvals a ON a.request_id = i.source_id
    LEFT JOIN journal j ON j.idem_key = '{APPROVED_STEP_PREFIX}' || i.source_id
    WHERE i.status = 'dead' AND i.source = 'approval'"""
# Claims of one event lost to a dead or fenced worker since its last retry by hand.
_COUNT_CRASHES = """
    SELECT COUNT(*) FROM attempts
    WHERE event_id = ? AND kind = 'lost'
      AND id > (SELECT COALESCE(MAX(id), 0) FROM attempts WHERE event_id = ? AND kind = 'retry')"""
_CALL_STATES = {None: "not_run", "claimed": "unknown", "unknown": "unknown", "committed": "done"}


def approved_step_key(request_id: str) -> str:
    """The journal key of the call approval request_id stands for (ToolGateway.execute_approved runs it)."""
    return f"{APPROVED_STEP_PREFIX}{request_id}"


class StrandedMixin(StoreBase):
    def stranded_answers(self, *, limit: int | None = None) -> list[StrandedAnswer]:
        """Answers whose event is dead (all, or the oldest `limit`), oldest event first: what the owner said and
        what became of it."""
        if limit is None:
            rows = self._conn.execute(f"{_SELECT_STRANDED} ORDER BY i.id").fetchall()
        else:
            rows = self._conn.execute(f"{_SELECT_STRANDED} ORDER BY i.id LIMIT ?", (int(limit),)).fetchall()
        return [self._stranded(row) for row in rows]

    def stranded_answer(self, event_id: int) -> StrandedAnswer | None:
        """The answer event event_id carries, if that event is dead; None otherwise."""
        for row in self._conn.execute(f"{_SELECT_STRANDED} AND i.id = ?", (event_id,)):
            return self._stranded(row)
        return None

    def _stranded(self, row: Any) -> StrandedAnswer:
        event_id, request_id, reason, attempts, error, died_at, outcome, action, tool, asked_by, step = row
        crashes = int(self._scalar(_COUNT_CRASHES, (event_id, event_id)))
        call = _CALL_STATES.get(step, "unknown") if outcome == "yes" and tool is not None else None
        return StrandedAnswer(request_id, outcome or "unknown", action, tool, event_id, asked_by, reason,
                              attempts, error, died_at, crashes, call)

    def _tell_of_stranded_answer(self, event_id: int, now: int) -> None:
        """Inside the transaction that parks event_id dead (fenced by its caller): tell the owner what became
        of the answer it carries. Urgent on a yes: the owner approved something and waits for it. The message
        is filed under the dead event, and is not an announcement (it carries no Yes / No buttons)."""
        stranded = self.stranded_answer(event_id)
        if stranded is None:
            return
        self._write_outbox(stranded.notice(), urgent=stranded.outcome == "yes", now=now, event_id=event_id)
        self._audit_stranded(stranded, now)
