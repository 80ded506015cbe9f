"""The event detail read, and the answer to "why hasn't this run?" for a pending event."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from console.core import Approval, Attempt, Event, JournalStep, OutboxMessage, Store
from console.spendfmt import RunSpend, runs_of
from console.timefmt import agent_in_words, relative, span
from console.tui.transcript import Transcript, build_transcript

AHEAD_LIMIT = 100


@dataclass(frozen=True)
class ApprovalTrail:
    """An approval the event asked for (or, for an approval event, the one it answers), and what phones sent."""

    approval: Approval
    phone_answers: list[dict[str, Any]] = field(default_factory=list)  # newest first


@dataclass(frozen=True)
class DetailView:
    event: Event | None
    history: list[Attempt]
    steps: list[JournalStep]
    replies: list[OutboxMessage]
    reasons: list[str]
    runs: list[RunSpend] = field(default_factory=list)  # the model calls filed under it, per run
    approvals: list[ApprovalTrail] = field(default_factory=list)
    transcript: Transcript = field(default_factory=Transcript)  # the model's turns and the tool calls


def clock_text(at: int | None, now: int, zone: tzinfo | None = None) -> str:
    """A moment as its user reads a clock, in their zone (the `timezone` setting; the machine's if
    None): the time of day, and the date only when it is not today."""
    if at is None:
        return "never"
    moment, today = datetime.fromtimestamp(at, zone), datetime.fromtimestamp(now, zone)
    shown = moment.strftime("%H:%M:%S" if moment.date() == today.date() else "%Y-%m-%d %H:%M")
    return f"{shown} ({relative(at, now, sep='')})"


def human_span(seconds: int) -> str:
    return span(max(0, seconds), sep="")


def read_detail(
    event_id: int, *, now: int, holder: str, mode: str, zone: tzinfo | None = None
) -> Callable[[Store], DetailView]:
    def read(store: Store) -> DetailView:
        event = store.event(event_id)
        if event is None:
            return DetailView(None, [], [], [], [f"event #{event_id} does not exist"])
        replies = [m for m in store.outbox_messages(limit=200) if m.event_id == event_id]
        approvals = [a for a in store.pending_approvals() if _mentions(a, event)]
        steps = store.journal_steps(event_id)
        return DetailView(
            event, store.history(event_id), steps, replies,
            why_not_run(store, event, now=now, holder=holder, mode=mode, approvals=approvals, replies=replies,
                        zone=zone),
            runs_of(store.event_spend(event_id)),
            approval_trails(store, event),
            build_transcript(steps, store.tool_calls(event_id)),
        )

    return read


def approval_trails(store: Store, event: Event) -> list[ApprovalTrail]:
    """The approvals an event asked for; for an approval's own event, that approval."""
    asked = store.approvals_of_event(event.id)
    if event.source == "approval":
        answered = store.approval(event.source_id)
        asked += [answered] if answered is not None else []
    return [ApprovalTrail(a, store.phone_answers(request_id=a.request_id, limit=10)) for a in asked]


def _mentions(approval: Approval, event: Event) -> bool:
    details = approval.details if isinstance(approval.details, dict) else {}
    return event.id in (details.get("event"), details.get("event_id")) or (
        approval.session_id is not None and str(event.id) in approval.session_id.split(":")
    )


def why_not_run(
    store: Store, event: Event, *, now: int, holder: str, mode: str,
    approvals: list[Approval], replies: list[OutboxMessage], zone: tzinfo | None = None,
) -> list[str]:
    """Plain sentences, most decisive first."""
    reasons: list[str] = []
    held = [m for m in replies if m.status == "queued"]
    if held:
        next_send = store.next_send_at(now=now)
        when = "when the next send is due" if next_send is None else clock_text(next_send, now, zone)
        reasons.append(f"{len(held)} reply held in the outbox by the send gap; it goes out {when}")
    for approval in approvals:
        reasons.append(
            f"waiting for approval {approval.request_id!r} ({approval.action}); "
            f"expires {clock_text(approval.expires_at, now, zone)}"
        )
    if event.status == "done":
        return reasons or ["done: it ran and finished"]
    if event.status == "dead":
        return [f"dead: {event.error or 'no reason recorded'} (press r to retry it)", *reasons]
    if event.status == "discarded":
        return [f"discarded {clock_text(event.updated_at, now, zone)}: it is never run again (press r to retry "
                f"it); it had failed: {event.error or 'no reason recorded'}", *reasons]
    if event.status == "running":
        return [f"running now under lease generation {event.claim_gen} (attempt {event.attempts})", *reasons]
    agent = store.agent_state().at(now)
    if agent.state != "ready":
        reasons.append(f"the agent is {agent_in_words(agent.state, agent.reason, agent.until, now, sep='')}; "
                       f"nothing is claimed meanwhile, and the wait costs no event an attempt")
    lease = store.lease()
    if lease is None or not lease.is_live(now):
        ended = "" if lease is None else f" (it lapsed {clock_text(lease.until, now, zone)})"
        reasons.append(f"no worker holds the lease{ended}; the next console or `agent-console run` takes it over")
    elif lease.holder != holder:
        reasons.append(
            f"the lease is held by another worker, {lease.holder} (generation {lease.gen}, "
            f"{human_span(lease.until - now)} left); this console is {mode}"
        )
    elif mode == "stalled":
        reasons.append("this console's worker is stalled (press the stall key again to resume it)")
    if event.attempts and event.next_attempt_at > now:
        reasons.append(
            f"backing off after attempt {event.attempts} of {store.max_attempts}: next try "
            f"{clock_text(event.next_attempt_at, now, zone)}; last error: {event.error or 'none'}"
        )
    ahead = len(store.events(status="pending", before_id=event.id, limit=AHEAD_LIMIT))
    if ahead:
        count = f"{ahead}+" if ahead >= AHEAD_LIMIT else str(ahead)
        reasons.append(f"{count} older pending event(s) are ahead of it (batches of {store.batch_cap})")
    return reasons or ["pending: it will be claimed on the worker's next pass"]
