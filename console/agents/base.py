"""The agent protocol: what one run gets (the claimed batch and a context) and what it may do.

The loop inside a run is the agent's own; this module is the bookkeeping around it. Everything a run
produces for the inbox is staged and written with its finish (one fenced transaction), so a run that
loses its lease says and asks nothing; everything it does in the world is a fenced journal step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from console import telemetry
from console.config import ConfigError
from console.core import (
    OWNER_ONLY,
    ApprovalDraft,
    CapNotice,
    CapReached,
    Event,
    MemoryEntry,
    MemoryWrite,
    OutboxDraft,
    RunOutcome,
    ScheduleDraft,
    ScheduleUpdate,
    StaleGeneration,
    Store,
    TimerDraft,
    ToolCallRecord,
    approval_id,
)
from console.core.journal import Interrupted
from console.core.memory import check_memory
from console.trust.callview import announcement, request_view
from console.trust.caps import cap_notice
from console.trust.provenance import group_chat

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
    created: bool  # False when this request already stands (asked and committed before): its deadline stands


@dataclass(frozen=True)
class Resumed:
    """An approval's outcome coming back, read from the approvals row (the single source of truth): the
    action the owner saw is the one that runs on yes, whatever any event payload or saved session says.

    answer is yes, no or expired, or unknown for an approval event with no settled request behind it.
    state is the session the asking run saved (its conversation), or None."""

    request_id: str
    answer: str
    action: str
    state: Any
    details: Any = None
    event_id: int | None = None  # the event that asked
    tool: str | None = None      # the exact call bound to the approval (None: a plain question)
    arguments: Any = None
    sources: Any = None          # what started the run that asked
    origin: Any = None           # where the request came from (the approvals row's origin)


@dataclass
class RunContext:
    """Handed to Agent.run. Not thread-safe: one run, one thread.

    What a run produces for the inbox (messages, approval requests with their sessions, timers) is staged
    here and commits with the run's fenced finish, or not at all. What it does in the world is a journal
    step, fenced when it is claimed and when it commits. Once the worker learns the lease is gone it sets
    `fence`, and the run's next call here raises StaleGeneration: the run stops.
    """

    store: Store
    events: list[Event]
    now: int
    holder: str
    gen: int
    approval_expiry: int
    messages: list[OutboxDraft] = field(default_factory=list)
    approvals: list[ApprovalRequest] = field(default_factory=list)
    drafts: list[ApprovalDraft] = field(default_factory=list)
    timers: list[TimerDraft] = field(default_factory=list)
    schedules: list[ScheduleDraft] = field(default_factory=list)
    schedule_updates: list[ScheduleUpdate] = field(default_factory=list)
    fence: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], int] | None = None  # the wall clock for fencing checks; None: the run's start, `now`
    notes: dict[int, str] = field(default_factory=dict)  # event id -> how this run ended for it
    deferred: dict[int, str] = field(default_factory=dict)  # event id -> why it was handed back unrun
    memory_writes: list[MemoryWrite] = field(default_factory=list)
    tool_log: list[ToolCallRecord] = field(default_factory=list)
    replayed_steps: set[str] = field(default_factory=set)  # journal steps an earlier attempt made: replayed here
    cap_notices: list[CapNotice] = field(default_factory=list)  # caps this run reached, for the owner
    # How many times each allowed call (by its events, tool and arguments) was made so far in this run: its
    # journal key's position (console.agents.gateway.call_keys).
    call_positions: dict[str, int] = field(default_factory=dict)
    # What made this run's conversations untrusted, once each ([]: every one stayed trusted); None until the
    # agent says (record_trust). The runtime may not judge trust itself: it reads this for the run's span.
    tainted_by: list[str] | None = None
    # Where this run's words may go (docs/security.md, the confidentiality model), from what its conversations had
    # read as each message was said: private data (read_private), and untrusted content with it (confined). Told
    # by the tool gateway and the agent as they read (reading); never unset within a run.
    read_private: bool = False
    confined: bool = False
    _reporting_outcome: bool = field(default=False, repr=False)

    def record_trust(self, tainted_by: Iterable[str]) -> None:
        """One conversation of this run ended with this trust (what tainted it; empty: trusted). The run is
        trusted only if all of its conversations were."""
        kept = [] if self.tainted_by is None else self.tainted_by
        kept.extend(why for why in tainted_by if why not in kept)
        self.tainted_by = kept

    def reading(self, *, private: bool, confined: bool) -> None:
        """A conversation of this run has read private data / untrusted content with it (Provenance.private,
        .confined): what it says from now on goes where such words may."""
        self.read_private = self.read_private or private
        self.confined = self.confined or confined

    def _owner_only(self) -> bool:
        """Whether what the run says now may reach only the owner's direct channels: it read untrusted content and
        private data (a sink would be someone else), or it is about a group chat and may not answer there (the
        group may read a run's words only when every event of the run came from that group and the run read no
        private data); then it goes to the owner's direct chat, never into the group or to a mail's sender."""
        if self.confined:
            return True
        groups = {group_chat(event) for event in self.events}
        if groups <= {None}:
            return False
        return self.read_private or len(groups) > 1

    def say(self, text: str, urgent: bool = False, *, announces: ApprovalRequest | None = None) -> None:
        """Queue a message; it enters the outbox only when this run's finish commits.

        announces links the message to the request it announces (what ask() returned): it goes in the
        urgent lane, and a phone channel sends it as a card with Yes / No buttons for that request. Inside
        reporting_outcome() every message is urgent too."""
        self.check_fence()
        if text.strip():
            owner_only = self._owner_only()
            self.messages.append(OutboxDraft(text, urgent or announces is not None or self._reporting_outcome,
                                             None if announces is None else announces.request_id,
                                             OWNER_ONLY if owner_only else None, not owner_only))

    def announce(self, request: ApprovalRequest) -> None:
        """Tell the owner about a request this run made: the urgent message a phone channel sends as its card,
        worded from what the request is bound to (every argument named, where the run came from), never from
        the model's words. A question reads as a question, a call as a call to approve."""
        draft = next((d for d in reversed(self.drafts) if d.request_id == request.request_id), None)
        row: dict[str, Any] = {"request_id": request.request_id, "action": request.action, "details": request.details}
        if draft is not None:
            row.update(tool=draft.tool, arguments=draft.arguments, sources=draft.sources,
                       origin=getattr(draft, "origin", None))
        self.say(announcement(request_view(row), expires_in_words(request.expires_in)), announces=request)

    @contextlib.contextmanager
    def reporting_outcome(self) -> Iterator[None]:
        """What the run says inside this block reports an approval's outcome (the approved action's result, or
        that nothing was done): it goes in the urgent lane, since the owner answered and waits to hear."""
        before, self._reporting_outcome = self._reporting_outcome, True
        try:
            yield
        finally:
            self._reporting_outcome = before

    def ask(
        self,
        action: str,
        details: dict[str, Any] | None = None,
        *,
        event: Event | None = None,
        expires_in: int | None = None,
        state: Any = None,
        tool: str | None = None,
        arguments: dict[str, Any] | None = None,
        sources: list[dict[str, Any]] | None = None,
        origin: dict[str, Any] | None = None,
    ) -> ApprovalRequest:
        """A deferred tool call: request an approval of `action` for `event` (the run's first event if
        not given), saving `state` to resume from, and let the run end.

        With `tool`, the approval is bound to that exact call: its name and canonical `arguments` are
        stored on the approvals row and are what runs on yes; the same call asked again is the same
        request, other arguments are another. `sources` (default: this run's events) tells the owner what
        started the run. The request id is anchored on the event and what is asked (approval_id), so a
        retried run, however its batch was cut, asks under the same id. The request, its session and its
        expiry are written by the run's finish.
        """
        self.check_fence()
        anchor = event if event is not None else (self.events[0] if self.events else None)
        if anchor is None:
            raise ValueError("a run with no events cannot ask for an approval")
        asked_for: Any = action if tool is None else {"tool": tool, "arguments": arguments or {}}
        rid = approval_id(anchor.id, asked_for)
        for asked in self.approvals:
            if asked.request_id == rid:
                return asked  # asked twice in one run: one request
        window = int(expires_in or self.approval_expiry)
        if window <= 0:
            raise ValueError("expires_in must be a positive number of seconds")
        standing = self.store.approval(rid)
        session = {"action": action, "details": details or {}, "state": state}
        where = sources if sources is not None else self.sources()
        self.drafts.append(ApprovalDraft(rid, action, window, dict(details or {}), session, anchor.id, tool,
                                         None if tool is None else dict(arguments or {}), where,
                                         origin))
        request = ApprovalRequest(rid, action, dict(details or {}),
                                  window if standing is None else max(0, standing.expires_at - self.now),
                                  standing is None)
        self.approvals.append(request)
        return request

    def step(self, key: str, fn: Callable[[], T], *, event: Event | None = None,
             aliases: Sequence[tuple[str, int | None]] = (), interrupted: Interrupted = "redo") -> T:
        """A journalled side effect: runs once per key across retries, resumes and takeovers. Filed under
        `event` (the run's first event if not given). Raises StaleGeneration once the lease is gone, and
        OutcomeUnknown for a step that may or may not have happened (Store.run_once: aliases, interrupted)."""
        self.check_fence()
        anchor = event if event is not None else (self.events[0] if self.events else None)
        result, how = self.store.run_once(key, fn, gen=self.gen, now=self.time(), holder=self.holder,
                                          event_id=None if anchor is None else anchor.id, aliases=aliases,
                                          interrupted=interrupted, clock=self.time)
        if how == "skipped":
            self.replayed_steps.add(key)
            telemetry.current().set("agent_console.journal.replayed", True)
            telemetry.span_event("journal.replay", {"agent_console.journal.step": key})
        self.check_fence()
        return result  # type: ignore[no-any-return]

    def take_call_slot(self, key: str, tool: str, *, event: Event, capped: bool = True) -> CapReached | None:
        """Count a world-changing call against the caps before it is made (console/core/caps.py), or answer
        the cap it would pass: the call must then ask instead, and the owner is told once (a notice staged
        for the finish). capped=False counts an approved call without checking. Fenced, and counted from the
        inbox, so a restart or a retry carries on the count."""
        self.check_fence()
        reached = self.store.take_call_slot(self.holder, self.gen, step_key=key, tool=tool, event_id=event.id,
                                            run_event_ids=[e.id for e in self.events], now=self.time(),
                                            capped=capped)
        if reached is not None and all(n.key != reached.notice_key for n in self.cap_notices):
            self.cap_notices.append(CapNotice(reached.notice_key, cap_notice(reached), reached.window))
        return reached

    def set_timer(self, timer_id: str, due: int, payload: dict[str, Any] | None = None, *,
                  origin: dict[str, Any] | None = None, **options: Any) -> None:
        """Set a timer; checked now (ValueError), written by the run's finish. origin: the conversation that
        set it (Provenance.write_origin); it fires with that conversation's trust."""
        self.check_fence()
        self.store.check_timer(timer_id, due, payload or {}, **options)
        self.timers.append(TimerDraft(timer_id, due, dict(payload or {}), dict(options), origin))

    def set_schedule(self, draft: ScheduleDraft) -> None:
        """Create or change a schedule (and its timer); written by the run's finish."""
        self.check_fence()
        self.schedules = [staged for staged in self.schedules if staged.spec.id != draft.spec.id] + [draft]

    def update_schedule(self, update: ScheduleUpdate) -> None:
        """What an occurrence's run decided about its schedule (ran, skipped, paused); written by its finish."""
        self.check_fence()
        self.schedule_updates.append(update)

    def remember(self, key: str, value: str, *, event: Event | None = None,
                 origin: dict[str, Any] | None = None) -> None:
        """Keep a note across runs; written by the run's finish (ValueError for a bad one, at once). origin:
        the conversation that wrote it (Provenance.write_origin), shown with the note and read by later runs."""
        self.check_fence()
        check_memory(key, value)
        anchor = event if event is not None else (self.events[0] if self.events else None)
        self.memory_writes.append(MemoryWrite(key.strip(), value, None if anchor is None else anchor.id, origin))

    def forget(self, key: str) -> bool:
        """Drop a note (at the run's finish). False when there is no such note."""
        self.check_fence()
        known = key in self.recall()
        self.memory_writes.append(MemoryWrite(key, None))
        return known

    def recall(self) -> dict[str, str]:
        """The notes as this run sees them: what is stored, with this run's own remembers and forgets."""
        return {entry.key: entry.value for entry in self.memory_entries()}

    def memory_entries(self) -> list[MemoryEntry]:
        """recall() with each note's origin (who wrote it, and whether that run was trusted), newest first."""
        notes = {entry.key: entry for entry in self.store.memory()}
        for write in self.memory_writes:
            notes.pop(write.key, None)
            if write.value is not None:
                notes[write.key] = MemoryEntry(write.key, write.value, self.now, write.event_id, write.origin)
        return sorted(notes.values(), key=lambda entry: -entry.updated_at)

    def log_tool_call(self, record: ToolCallRecord) -> None:
        """The transcript's record of one tool call (written by the run's finish)."""
        self.tool_log.append(record)

    def sources(self, events: Iterable[Event] | None = None) -> list[dict[str, Any]]:
        """Where the run's events (or the given ones) came from, for an approval's owner to see."""
        return [{"event_id": e.id, "source": e.source, "source_id": e.source_id}
                for e in (self.events if events is None else events)]

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
        """For an approval event: the settled outcome, the action and the saved session, all read from
        the approvals row and its session (never from the event's payload)."""
        if event.source != "approval":
            return None
        request_id = event.source_id
        approval = self.store.approval(request_id)
        if approval is None:
            return Resumed(request_id, "unknown", "", None)
        saved = self.store.load_session(approval.session_id) if approval.session_id else None
        waited = None if approval.resolved_at is None else max(0, approval.resolved_at - approval.requested_at)
        outcome = approval.outcome or "unknown"
        telemetry.current().set("agent_console.event.resumes", [approval.event_id] if approval.event_id else None)
        telemetry.span_event("approval.answered", {
            "agent_console.approval.id": request_id, "agent_console.approval.outcome": outcome,
            "agent_console.approval.channel": approval.answered_via, "agent_console.approval.waited_s": waited})
        telemetry.count("agent_console.approvals", "{approval}", "Approvals by outcome and channel",
                        {"agent_console.approval.outcome": outcome,
                         "agent_console.approval.channel": approval.answered_via or "unknown"})
        if waited is not None:
            telemetry.record("agent_console.approval.wait", "s", "Time from asking to the answer", waited,
                             {"agent_console.approval.outcome": outcome})
        return Resumed(request_id, approval.outcome or "unknown", approval.action, saved, approval.details,
                       approval.event_id, approval.tool, approval.arguments, approval.sources, approval.origin)

    def time(self) -> int:
        return self.now if self.clock is None else self.clock()

    def check_fence(self) -> None:
        if self.fence.is_set():
            raise StaleGeneration(f"generation {self.gen} lost the lease; this run stops")

    def finish(self, ids: list[int] | None = None, *, error: str | None = None, now: int | None = None) -> bool:
        """Record the run's outcome with everything it staged, in one fenced transaction (tests and
        simple callers; the worker does the same from its writer thread with `staged()`)."""
        ids = [e.id for e in self.events] if ids is None else ids
        return self.store.finish_run(self.holder, self.gen, ids, self.staged(),
                                     now=self.time() if now is None else now, error=error)

    def staged(self) -> RunOutcome:
        """What this run produced for the inbox, for its finish to write."""
        return RunOutcome(list(self.messages), list(self.drafts), list(self.timers), dict(self.notes),
                          list(self.memory_writes), list(self.tool_log), list(self.cap_notices),
                          list(self.schedules), list(self.schedule_updates))


def expires_in_words(seconds: int) -> str:
    """'expires in 45 s' / '10 min' / '2 h 5 min': an approval's window as the owner reads it (a 3 s
    window is not 'expires in 1 min')."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"expires in {seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"expires in {minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"expires in {hours} h" + (f" {rest} min" if rest else "")


class Agent(Protocol):
    name: str

    def run(self, ctx: RunContext) -> None:
        """Handle ctx.events. Raise to fail the run (it is retried with backoff, then parked dead)."""
