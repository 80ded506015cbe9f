"""The agent protocol: what one run gets (the claimed batch and a context) and what it may do.

The loop inside a run is the agent's own; this module is the bookkeeping around it. Everything a run
says is queued with its finish (one fenced transaction), so a run that loses its lease says nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from console.config import ConfigError
from console.core import Event, Store

T = TypeVar("T")


class AgentSetupError(ConfigError, ValueError):
    """The chosen agent cannot start (a missing extra, a missing key). A ConfigError, so the command line
    prints it as one line; a ValueError, as callers building an agent from bad settings expect."""


@dataclass(frozen=True)
class ApprovalRequest:
    request_id: str
    action: str
    details: dict[str, Any]
    expires_in: int
    created: bool  # False when a retried run asked again: the first request and its deadline stand


@dataclass(frozen=True)
class Resumed:
    """A saved session coming back with the outcome of its approval (yes, no or expired)."""

    request_id: str
    answer: str
    action: str
    state: Any


@dataclass
class RunContext:
    """Handed to Agent.run. Not thread-safe: one run, one thread."""

    store: Store
    events: list[Event]
    now: int
    holder: str
    gen: int
    approval_expiry: int
    messages: list[tuple[str, bool]] = field(default_factory=list)
    approvals: list[ApprovalRequest] = field(default_factory=list)
    notes: dict[int, str] = field(default_factory=dict)  # event id -> how this run ended for it
    deferred: dict[int, str] = field(default_factory=dict)  # event id -> why it was handed back unrun

    def say(self, text: str, urgent: bool = False) -> None:
        """Queue a message; it enters the outbox only when this run's finish commits."""
        if text.strip():
            self.messages.append((text, urgent))

    def ask(
        self,
        action: str,
        details: dict[str, Any] | None = None,
        *,
        expires_in: int | None = None,
        state: Any = None,
        request_id: str | None = None,
    ) -> ApprovalRequest:
        """A deferred tool call: save the session, request an approval, and let the run end.

        The request id is derived from the first event of the run, so a retried run asks the same
        question under the same id instead of opening a second approval.
        """
        anchor = self.events[0].id if self.events else self.now
        rid = request_id or f"apr-{anchor}-{len(self.approvals) + 1}"
        window = int(expires_in or self.approval_expiry)
        self.store.save_session(rid, {"action": action, "details": details or {}, "state": state}, now=self.now)
        created = self.store.request_approval(
            rid, action, now=self.now, expires_in=window, details=details or {}, session_id=rid
        )
        request = ApprovalRequest(rid, action, dict(details or {}), window, created)
        self.approvals.append(request)
        return request

    def step(self, key: str, fn: Callable[[], T]) -> T:
        """A journalled side effect: runs once per key across retries, resumes and takeovers."""
        event_id = self.events[0].id if self.events else None
        result, _how = self.store.run_once(key, fn, gen=self.gen, now=self.now, event_id=event_id)
        return result  # type: ignore[no-any-return]

    def set_timer(self, timer_id: str, due: int, payload: dict[str, Any] | None = None, **options: Any) -> None:
        self.store.add_timer(timer_id, due, payload or {}, now=self.now, **options)

    def note(self, text: str, event_ids: Iterable[int] | None = None) -> None:
        """Say in the events' history how this run ended for them (the model declined, say): the note is
        recorded on their finish, so it commits with the run or not at all. None means every event."""
        for event_id in (event.id for event in self.events) if event_ids is None else event_ids:
            self.notes[event_id] = text

    def defer(self, events: Iterable[Event], reason: str) -> None:
        """Hand events back unrun: when the run ends they return to pending with no attempt spent, for a
        later run (they did not fit this one). Only for events nothing has been done for yet."""
        for event in events:
            self.deferred[event.id] = reason

    def resumed(self, event: Event) -> Resumed | None:
        """For an approval event: the saved session with the answer that stands."""
        if event.source != "approval" or not isinstance(event.payload, dict):
            return None
        request_id = str(event.payload.get("approval", event.source_id))
        saved = self.store.load_session(request_id) or {}
        action = str(event.payload.get("action") or saved.get("action") or "")
        return Resumed(request_id, str(event.payload.get("answer", "")), action, saved)


class Agent(Protocol):
    name: str

    def run(self, ctx: RunContext) -> None:
        """Handle ctx.events. Raise to fail the run (it is retried with backoff, then parked dead)."""
