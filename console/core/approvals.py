"""Deferred tool calls: an approval expires into an `expired` answer under its own key.

The answer and the expiry race for one inbox key, ('approval', request_id), so exactly one outcome
is ever stored and the saved session resumes either way. The answer path checks the deadline in its
own transaction rather than trusting that the scheduler has already run.
"""

from __future__ import annotations

from typing import Any

from console.core.base import dumps, loads
from console.core.db import transaction, translate_errors
from console.core.models import Approval
from console.core.timers import APPROVAL_EXPIRY_PREFIX, TimersMixin

ANSWERS = ("yes", "no")
_COLUMNS = "request_id, action, details, session_id, requested_at, expires_at, outcome, resolved_at"


def _approval(row: tuple[Any, ...]) -> Approval:
    rid, action, details, session_id, requested_at, expires_at, outcome, resolved_at = row
    return Approval(rid, action, loads(details), session_id, requested_at, expires_at, outcome, resolved_at)


def _expired(request_id: str, action: str) -> str:
    """The outcome an approval's expiry stores (by its timer, or by an answer that came too late)."""
    return dumps({"approval": request_id, "answer": "expired", "action": action})


def expiry_timer_id(request_id: str) -> str:
    return f"{APPROVAL_EXPIRY_PREFIX}{request_id}"


class ApprovalsMixin(TimersMixin):
    def request_approval(
        self,
        request_id: str,
        action: str,
        *,
        now: int,
        expires_in: int,
        details: Any = None,
        session_id: str | None = None,
    ) -> bool:
        """Ask for a yes/no. Returns False if this request id was already made: the first request
        and its deadline stand, so a retried run cannot extend its own deadline."""
        if not isinstance(request_id, str) or not request_id.strip():
            raise ValueError("request id must be a non-empty string")
        if expires_in <= 0:
            raise ValueError("expires_in must be a positive number of seconds")
        expires_at = now + int(expires_in)
        expiry = _expired(request_id, action)
        with translate_errors(), transaction(self._conn):
            made = self._conn.execute(
                f"""INSERT INTO approvals ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)
                    ON CONFLICT (request_id) DO NOTHING RETURNING request_id""",
                (request_id, action, dumps(details if details is not None else {}), session_id, now, expires_at),
            ).fetchall()
            if not made:
                return False
            self._conn.execute(
                """INSERT OR REPLACE INTO timers (id, due, payload, ev_source, ev_id, created_at)
                   VALUES (?, ?, ?, 'approval', ?, ?)""",
                (expiry_timer_id(request_id), expires_at, expiry, request_id, now),
            )
            return True

    def answer_approval(self, request_id: str, answer: str, *, now: int) -> str:
        """Store the user's answer unless the deadline passed. Returns the outcome that stands:
        'yes' / 'no', 'expired', or 'unknown' for a request never made."""
        if answer not in ANSWERS:
            raise ValueError(f"an approval answer is 'yes' or 'no', not {answer!r}")
        with translate_errors(), transaction(self._conn):
            # The approval row, not its expiry timer: that timer is listed with the user's own and can be
            # removed or replaced by hand, while the request and its deadline stand.
            row = self._conn.execute(
                "SELECT expires_at, action FROM approvals WHERE request_id = ?", (request_id,)
            ).fetchall()
            if not row:
                return "unknown"
            expires_at, action = row[0]
            if now >= expires_at:
                payload = _expired(request_id, action)
            else:
                payload = dumps({"approval": request_id, "answer": answer})
            self._insert_event("approval", request_id, payload, now)
            outcome = self._settle_approval(request_id, now)
            assert outcome is not None
            return outcome

    def approval(self, request_id: str) -> Approval | None:
        for row in self._conn.execute(f"SELECT {_COLUMNS} FROM approvals WHERE request_id = ?", (request_id,)):
            return _approval(row)
        return None

    def pending_approvals(self) -> list[Approval]:
        """Unanswered requests, soonest deadline first (expired-but-not-yet-swept ones included)."""
        return [
            _approval(r)
            for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM approvals INDEXED BY approvals_pending WHERE outcome IS NULL "
                "ORDER BY expires_at"
            )
        ]

    def resolved_approvals(self, limit: int = 10) -> list[Approval]:
        return [
            _approval(r)
            for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM approvals INDEXED BY approvals_resolved WHERE outcome IS NOT NULL "
                "ORDER BY resolved_at DESC LIMIT ?",
                (limit,),
            )
        ]
