"""Deferred tool calls: an approval expires into an `expired` answer under its own key.

The answer and the expiry race for one inbox key, ('approval', request_id), so exactly one outcome
is ever stored and the saved session resumes either way. The answer path checks the deadline in its
own transaction rather than trusting that the scheduler has already run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from console.core.base import StoreBase, dumps, loads
from console.core.models import Approval, ApprovalDraft
from console.core.timers import APPROVAL_EXPIRY_PREFIX

ANSWERS = ("yes", "no")
# Where an answer can come from (answered_via); an outcome stored by the expiry timer says 'expiry'.
ANSWER_PATHS = ("console", "cli", "ntfy", "telegram", "api")
_COLUMNS = ("request_id, action, details, session_id, requested_at, expires_at, outcome, resolved_at, event_id, "
            "tool, arguments, sources, answered_via, origin")


def _approval(row: tuple[Any, ...]) -> Approval:
    rid, action, details, session, requested_at, expires_at, outcome, resolved_at, event_id, tool, args, sources, \
        via, origin = row
    return Approval(rid, action, loads(details), session, requested_at, expires_at, outcome, resolved_at,
                    event_id, tool, loads(args), loads(sources), via, loads(origin))


def approval_id(event_id: int, action: Any) -> str:
    """The request id of asking `action` for one event: `apr-<event id>-<digest of the action>`.

    Anchored on the event and on what is asked (the action, later a tool with its canonical arguments),
    never on a position in a batch, so the same request for the same event is the same row however the
    batch was cut, and a retry asks again under the id it had; asking something else gets its own id."""
    canonical = json.dumps(action, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:8]
    return f"apr-{int(event_id)}-{digest}"


def _expired(request_id: str, action: str) -> str:
    """The outcome an approval's expiry stores (by its timer, or by an answer that came too late)."""
    return dumps({"approval": request_id, "answer": "expired", "action": action})


def expiry_timer_id(request_id: str) -> str:
    return f"{APPROVAL_EXPIRY_PREFIX}{request_id}"


def _check_request(request_id: str, expires_in: int) -> None:
    if not isinstance(request_id, str) or not request_id.strip():
        raise ValueError("request id must be a non-empty string")
    if expires_in <= 0:
        raise ValueError("expires_in must be a positive number of seconds")


class ApprovalsMixin(StoreBase):
    def request_approval(
        self,
        request_id: str,
        action: str,
        *,
        now: int,
        expires_in: int,
        details: Any = None,
        session_id: str | None = None,
        event_id: int | None = None,
    ) -> bool:
        """Ask for a yes/no. Returns False if this request id was already made: the first request
        and its deadline stand, so a retried run cannot extend its own deadline.

        A run does not call this: it stages its requests (RunContext.ask), and they are written by its
        fenced finish (see InboxMixin.finish)."""
        _check_request(request_id, expires_in)
        draft = ApprovalDraft(request_id, action, expires_in, details, event_id=event_id)
        with self.write_transaction():
            return self._insert_approval(draft, now, session_id)

    def _insert_approval(self, draft: ApprovalDraft, now: int, session_id: str | None) -> bool:
        """The request row and its expiry timer (inside the caller's transaction); False if it exists."""
        request_id, action = draft.request_id, draft.action
        expires_at = now + int(draft.expires_in)
        made = self._conn.execute(
            f"""INSERT INTO approvals ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?, NULL, ?)
                ON CONFLICT (request_id) DO NOTHING RETURNING request_id""",
            (request_id, action, dumps(draft.details if draft.details is not None else {}), session_id, now,
             expires_at, draft.event_id, draft.tool, None if draft.tool is None else dumps(draft.arguments),
             None if draft.sources is None else dumps(draft.sources),
             None if draft.origin is None else dumps(draft.origin)),
        ).fetchall()
        if not made:
            return False
        self._conn.execute(
            """INSERT INTO timers (id, due, payload, ev_source, ev_id, created_at) VALUES (?, ?, ?, 'approval', ?, ?)
               ON CONFLICT (id) DO UPDATE SET due = excluded.due, payload = excluded.payload,
                  ev_source = excluded.ev_source, ev_id = excluded.ev_id, created_at = excluded.created_at,
                  every = NULL, cron = NULL, tz = NULL, catch_up = 'coalesce', each_cap = 100, paused = 0, done = 0,
                  last_fired_at = NULL, origin = NULL""",
            (expiry_timer_id(request_id), expires_at, _expired(request_id, action), request_id, now),
        )
        return True

    def answer_approval(self, request_id: str, answer: str, *, now: int, via: str = "api") -> str:
        """Store the user's answer unless the deadline passed. Returns the outcome that stands:
        'yes' / 'no', 'expired', or 'unknown' for a request never made.

        `via` says where the answer came from (console, cli, ntfy, telegram, api); it is recorded with the
        outcome when this answer is the one that settles it."""
        with self.write_transaction():
            return self._answer(request_id, answer, now, via)[0]

    def _answer(self, request_id: str, answer: str, now: int, via: str) -> tuple[str, bool]:
        """The one answer path, inside the caller's transaction: (the outcome that stands, whether this
        answer settled it). Every way of answering (the CLI, the console, a phone) comes through here."""
        if answer not in ANSWERS:
            raise ValueError(f"an approval answer is 'yes' or 'no', not {answer!r}")
        if via not in ANSWER_PATHS:
            raise ValueError(f"an answer comes from one of {', '.join(ANSWER_PATHS)}, not {via!r}")
        # The approval row, not its expiry timer: that timer is listed with the user's own and can be
        # removed or replaced by hand, while the request and its deadline stand.
        row = self._conn.execute(
            "SELECT expires_at, action FROM approvals WHERE request_id = ?", (request_id,)
        ).fetchall()
        if not row:
            return "unknown", False
        expires_at, action = row[0]
        if now >= expires_at:
            payload = _expired(request_id, action)
        else:
            payload = dumps({"approval": request_id, "answer": answer})
        settled = self._insert_event("approval", request_id, payload, now)
        outcome = self._settle_approval(request_id, now, via)
        assert outcome is not None
        return outcome, settled

    def approval(self, request_id: str) -> Approval | None:
        for row in self._conn.execute(f"SELECT {_COLUMNS} FROM approvals WHERE request_id = ?", (request_id,)):
            return _approval(row)
        return None

    def approvals_of_event(self, event_id: int) -> list[Approval]:
        """The approvals an event asked for, in the order they were asked."""
        return [
            _approval(r)
            for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM approvals INDEXED BY approvals_event WHERE event_id = ? "
                "ORDER BY requested_at, request_id",
                (event_id,),
            )
        ]

    def pending_approvals(self, limit: int | None = None) -> list[Approval]:
        """Unanswered requests, soonest deadline first (expired-but-not-yet-swept ones included); the first
        `limit` of them when given (what a pane can show: a flood of requests must not cost a reader them all)."""
        window = "" if limit is None else " LIMIT ?"
        return [
            _approval(r)
            for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM approvals INDEXED BY approvals_pending WHERE outcome IS NULL "
                f"ORDER BY expires_at{window}", () if limit is None else (int(limit),)
            )
        ]

    def pending_approval_count(self) -> int:
        """How many requests wait for an answer (read from the pending requests' index)."""
        return int(self._scalar("SELECT COUNT(*) FROM approvals INDEXED BY approvals_pending WHERE outcome IS NULL"))

    def resolved_approvals(self, limit: int = 10) -> list[Approval]:
        return [
            _approval(r)
            for r in self._conn.execute(
                f"SELECT {_COLUMNS} FROM approvals INDEXED BY approvals_resolved WHERE outcome IS NOT NULL "
                "ORDER BY resolved_at DESC LIMIT ?",
                (limit,),
            )
        ]
