"""Why hasn't this event run? One answer for every reader: each reason a kind, the facts behind it, and its
sentence. The console's event detail and `agent-console show` both print it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

from console.core import Event, Store
from console.core.models import death_in_words
from console.timefmt import agent_in_words, clock_text, span
from console.trust.callview import request_view

AHEAD_LIMIT = 100  # older pending events counted, at most: "100+ ahead" says enough

# The kinds of reason, most decisive first within an answer.
REASON_KINDS = ("done", "dead", "discarded", "running", "stranded_answer", "reply_held", "awaiting_approval",
                "batch_failed", "agent_not_ready",
                "no_lease", "lease_elsewhere", "stalled", "backing_off", "behind_older", "next_pass")


@dataclass(frozen=True)
class Reason:
    kind: str  # one of REASON_KINDS
    sentence: str
    facts: dict[str, Any] = field(default_factory=dict)  # what the sentence says, as values


@dataclass(frozen=True)
class WhyNotRun:
    event_id: int
    status: str
    reasons: tuple[Reason, ...]

    @property
    def title(self) -> str:
        return "Why hasn't this run?" if self.status == "pending" else "State"

    @property
    def sentences(self) -> list[str]:
        return [reason.sentence for reason in self.reasons]

    def kinds(self) -> list[str]:
        return [reason.kind for reason in self.reasons]

    def as_json(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "status": self.status,
                "reasons": [{"kind": r.kind, "sentence": r.sentence, **r.facts} for r in self.reasons]}


def why_not_run(
    store: Store, event: Event, *, now: int, zone: tzinfo | None = None, holder: str | None = None,
    mode: str | None = None, resume_key: str | None = None,
) -> WhyNotRun:
    """The state of `event` and, while it is pending, everything that keeps it from running, most decisive
    first. holder and mode are the asking console's own worker (None from the command line: no worker of
    its own); resume_key the key that resumes a stalled console, as it is bound there."""
    resume = f"press {resume_key} to resume it" if resume_key else "press the stall key again to resume it"

    def at(moment: int | None) -> str:
        return clock_text(moment, now, zone)

    reasons: list[Reason] = []
    held = [m for m in store.event_replies(event.id) if m.status == "queued"]
    if held:
        next_send = store.next_send_at(now=now)
        when = "when the next send is due" if next_send is None else at(next_send)
        reasons.append(Reason("reply_held", f"{len(held)} repl{'y' if len(held) == 1 else 'ies'} held in the "
                              f"outbox by the send gap; {'it goes' if len(held) == 1 else 'they go'} out {when}",
                              {"held": len(held), "next_send_at": next_send}))
    stranded = [] if event.source != "approval" else [store.stranded_answer(event.id)]
    for approval in store.approvals_of_event(event.id):
        if approval.outcome is None:
            reasons.append(Reason(
                "awaiting_approval",
                f"waiting for approval {approval.request_id!r} ({request_view(approval).compact()}); "
                f"expires {at(approval.expires_at)}",
                {"request_id": approval.request_id, "expires_at": approval.expires_at}))
        else:  # its answer came back as an event: that event may have died before the conversation resumed
            answer = store.find_event("approval", approval.request_id)
            if answer is not None and answer.status == "dead":
                stranded.append(store.stranded_answer(answer.id))
    reasons[:0] = [Reason("stranded_answer", f"approval {s.request_id!r} ({s.action}): {s.in_words()}",
                          s.public()) for s in stranded if s is not None]
    if event.status == "done":
        settled = any(reason.kind != "stranded_answer" for reason in reasons)  # else the run's own end comes first
        return _answer(event, [*([] if settled else [Reason("done", "done: it ran and finished")]), *reasons])
    if event.status == "dead":
        return _answer(event, [Reason("dead", f"dead: {event.death_in_words()}; a retry runs it again",
                                      {"dead_reason": event.dead_reason, "error": event.error,
                                       "attempts": event.attempts}), *reasons])
    if event.status == "discarded":
        return _answer(event, [_discarded(event, at), *reasons])
    if event.status == "running":
        return _answer(event, [Reason("running", f"running now under lease generation {event.claim_gen} "
                                      f"(attempt {event.attempts})", {"gen": event.claim_gen,
                                                                      "attempt": event.attempts}), *reasons])
    batch_failure = event.batch_failure_in_words()
    if batch_failure is not None:  # pending again through no fault of its own: first, it says whose fault
        reasons.append(Reason("batch_failed", batch_failure, {"poison": event.failed_with}))
    agent = store.agent_state().at(now)
    if agent.state != "ready":
        reasons.append(Reason(
            "agent_not_ready",
            f"the agent is {agent_in_words(agent.state, agent.reason, agent.until, now, sep='')}; nothing is "
            f"claimed meanwhile, and the wait costs no event an attempt",
            {"state": agent.state, "reason": agent.reason, "until": agent.until}))
    lease = store.lease()
    if lease is None or not lease.is_live(now):
        ended = "" if lease is None else f" (it lapsed {at(lease.until)})"
        reasons.append(Reason("no_lease", f"no worker holds the lease{ended}; the next console or "
                              "`agent-console run` takes it over",
                              {"lapsed_at": None if lease is None else lease.until}))
    elif lease.holder != holder:
        mine = "" if holder is None else f"; this console is {mode}" + (f" ({resume})" if mode == "stalled" else "")
        another = "another worker, " if holder is not None else "worker "
        reasons.append(Reason(
            "lease_elsewhere",
            f"the lease is held by {another}{lease.holder} (generation {lease.gen}, "
            f"{span(max(0, lease.until - now), sep='')} left){mine}",
            {"holder": lease.holder, "gen": lease.gen, "until": lease.until}))
    elif mode == "stalled":
        reasons.append(Reason("stalled", f"this console's worker is stalled ({resume})"))
    if event.attempts and event.next_attempt_at > now:
        reasons.append(Reason(
            "backing_off",
            f"backing off after attempt {event.attempts} of {store.options.max_attempts}: next try "
            f"{at(event.next_attempt_at)}; last error: {event.error or 'none'}",
            {"attempts": event.attempts, "max_attempts": store.options.max_attempts,
             "next_attempt_at": event.next_attempt_at, "error": event.error}))
    ahead = len(store.events(status="pending", before_id=event.id, limit=AHEAD_LIMIT))
    if ahead:
        count = f"{ahead}+" if ahead >= AHEAD_LIMIT else str(ahead)
        reasons.append(Reason(
            "behind_older", f"{count} older pending event{'' if ahead == 1 else 's'} ahead of it "
            f"(batches of {store.options.batch_cap})", {"ahead": ahead, "at_least": ahead >= AHEAD_LIMIT}))
    return _answer(event, reasons or [Reason("next_pass", "pending: it will be claimed on the worker's next pass")])


def _discarded(event: Event, at: Callable[[int | None], str]) -> Reason:
    """The owner gave up on it: never claimed again. What it had been through, when it went: its death (the
    reason kept) or, given up on while still pending, its last error if it had one."""
    if event.dead_reason is not None:
        before = f"; it had died: {death_in_words(event.dead_reason, event.attempts, event.error)}"
    elif event.error:
        before = f"; last error: {event.error}"
    else:
        before = ""
    if event.pruned_at is None:
        undo = "a retry brings it back"
    else:
        undo = f"retention cleared it {at(event.pruned_at)}, so it cannot be retried"
    return Reason("discarded", f"discarded {at(event.updated_at)}: it is never run again; {undo}"
                  f"{before}", {"discarded_at": event.updated_at, "dead_reason": event.dead_reason,
                                "error": event.error, "attempts": event.attempts, "pruned_at": event.pruned_at})


def _answer(event: Event, reasons: list[Reason]) -> WhyNotRun:
    return WhyNotRun(event.id, event.status, tuple(reasons))
