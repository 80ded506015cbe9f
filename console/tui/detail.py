"""The event detail read: one snapshot of an event with its history, steps, replies, approvals and the answer to
"why hasn't this run?" (console.runtime.why, which `agent-console show` prints too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

from console.core import Approval, Attempt, Event, JournalStep, OutboxMessage, Store
from console.runtime.why import WhyNotRun, why_not_run
from console.spendfmt import RunSpend, runs_of
from console.timefmt import clock_text, span
from console.tui.reads import EventFilter
from console.tui.transcript import Transcript, build_transcript

__all__ = ["ApprovalTrail", "DetailView", "clock_text", "human_span", "read_detail", "read_neighbour"]


@dataclass(frozen=True)
class ApprovalTrail:
    """An approval the event asked for (or, for an approval event, the one it answers), and what phones sent."""

    approval: Approval
    phone_answers: list[dict[str, Any]] = field(default_factory=list)  # newest first


@dataclass(frozen=True)
class DetailView:
    """What the detail screen shows, read at `now`. event None: the id names no event (`missing` says so)."""

    event_id: int
    now: int
    event: Event | None
    history: list[Attempt] = field(default_factory=list)
    steps: list[JournalStep] = field(default_factory=list)
    replies: list[OutboxMessage] = field(default_factory=list)  # the messages its run queued, oldest first
    why: WhyNotRun | None = None
    runs: list[RunSpend] = field(default_factory=list)  # the model calls filed under it, per run
    approvals: list[ApprovalTrail] = field(default_factory=list)
    transcript: Transcript = field(default_factory=Transcript)  # the model's turns and the tool calls

    @property
    def missing(self) -> str:
        return f"event #{self.event_id} does not exist"

    def waiting_approval(self) -> Approval | None:
        """The approval this event asked for that still waits for an answer (the soonest to expire)."""
        waiting = [t.approval for t in self.approvals if t.approval.outcome is None]
        return min(waiting, key=lambda a: a.expires_at) if waiting else None


def human_span(seconds: int) -> str:
    return span(max(0, seconds), sep="")


def read_detail(
    event_id: int, *, now: int, holder: str, mode: str, zone: tzinfo | None = None, resume_key: str | None = None
) -> Callable[[Store], DetailView]:
    def read(store: Store) -> DetailView:
        event = store.event(event_id)
        if event is None:
            return DetailView(event_id, now, None)
        steps, history = store.journal_steps(event_id), store.history(event_id)
        return DetailView(
            event_id, now, event, history, steps, store.event_replies(event_id),
            why_not_run(store, event, now=now, zone=zone, holder=holder, mode=mode, resume_key=resume_key),
            runs_of(store.event_spend(event_id)),
            approval_trails(store, event),
            build_transcript(steps, store.tool_calls(event_id), history),
        )

    return read


def read_neighbour(event_id: int, flt: EventFilter, *, older: bool) -> Callable[[Store], int | None]:
    """The id of the event beside event_id in the events table under its filter and order: the row below
    (older, when sorted newest first) or above; None at either end."""

    def read(store: Store) -> int | None:
        event = store.event(event_id)
        if event is None:
            return None
        found = flt.run(store, start=flt.key(event), backwards=not older, limit=1)
        return found[0].id if found else None

    return read


def approval_trails(store: Store, event: Event) -> list[ApprovalTrail]:
    """The approvals an event asked for (by the event id each carries); for an approval's own event, that
    approval."""
    asked = store.approvals_of_event(event.id)
    if event.source == "approval":
        answered = store.approval(event.source_id)
        asked += [answered] if answered is not None else []
    return [ApprovalTrail(a, store.phone_answers(request_id=a.request_id, limit=10)) for a in asked]
