"""A run's outcome committed: everything it staged (RunOutcome) written inside its fenced finish, each row by
its own table's writer (the outbox's, the approvals', the sessions', the timers', memory's, the tool calls' and
the audit trail's), so no table is written from two places."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from console.core.base import StoreBase
from console.core.caps import queue_run_messages
from console.core.models import RunOutcome


def _trusted(origin: Any, details: Any) -> bool:
    """Whether a request was asked by a trusted run: its origin says so (a request without one is trusted only
    when its details name nothing untrusted)."""
    if isinstance(origin, dict) and "trusted" in origin:
        return origin["trusted"] is True
    return not (isinstance(details, dict) and details.get("untrusted"))


def commit_outcome(store: StoreBase, outcome: RunOutcome, ids: Sequence[int], now: int) -> None:
    """Write what a successful run staged, inside its finish's transaction (the caller checked the fence).

    The messages are filed under the run's first event and answer the chat it came from; most finishes queue
    nothing, and then no cap is counted and no conversation looked up."""
    if outcome.messages or outcome.notices:
        queue_run_messages(store, outcome.messages, ids[0] if ids else None, now, outcome.notices,
                           reply_to=store.conversation_of(ids) if outcome.messages else None,
                           untrusted_requests={draft.request_id for draft in outcome.approvals
                                               if not _trusted(draft.origin, draft.details)})
    for draft in outcome.approvals:
        if store._insert_approval(draft, now, draft.request_id):  # a request that already stands keeps its session
            store._write_session(draft.request_id, draft.session, now)
    for timer in outcome.timers:
        store._write_timer(store._timer_values(timer.timer_id, timer.due, timer.payload, now=now, **timer.options),
                           timer.origin)
    for schedule in outcome.schedules:
        store._write_schedule(schedule, now)
    for update in outcome.schedule_updates:
        store._update_schedule(update, now)
    for write in outcome.memory:
        store._write_memory(write, now)
    for call in outcome.tool_calls:
        store._write_tool_call(call, now)
    store._audit_calls(outcome.tool_calls, now)  # in the run's fenced finish, with the transcript's record
