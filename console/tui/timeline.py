"""A run's timeline for the console: an event's runs as steps in time order, each with when it started and how long
it took. Built from what the inbox keeps: the attempt history (each run from its claim to its end, the waits
before a retry), the step journal (model turns, keys `...:turn:N`; tool calls, keys `tool:...`; other steps), the
tool calls recorded at each run's finish (allowed / asked / refused, and the outcome), the approvals (asked at,
answered at, by whom), the replies in the outbox (queued at, sent at) and the spend ledger (each turn's model).
Plain data and words; the timeline screen draws it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.core import Approval, Attempt, Event, JournalStep, OutboxMessage, Store, ToolCallRecord
from console.core.models import SpendRow
from console.core.stranded import APPROVED_STEP_PREFIX
from console.spendfmt import money
from console.timefmt import via_in_words
from console.tui.transcript import arguments_line

# The history lines that end a run (after its claim): its finish, its failure, a takeover that found it lost,
# a refused late finish, a batch-mate's failure, a deferral.
RUN_ENDS = frozenset({"finish", "error", "lost", "refused", "batch", "deferred", "unsent", "dead"})
FAILED_ENDS = frozenset({"error", "lost", "batch", "unsent"})
ARGUMENTS_CHARS = 60  # of a call's arguments on its line (its tool name and request id are never cut)
DECISION_WORDS = {"allowed": "allowed", "asked": "asked", "denied": "refused", "approved": "approved",
                  "declined": "declined", "expired": "expired", "unknown": "unknown"}


@dataclass(frozen=True)
class Step:
    """One step of a run: kind run | turn | call | approval | send | retry | step; end None while it goes on."""

    kind: str
    start: int
    end: int | None
    label: str  # what it is, whole: a tool's name and a request id are never cut
    outcome: str = ""
    style: str = ""  # a hint for the screen: "warning", "error" or "" (the kind's colour)

    def took(self, now: int) -> int:
        return max(0, (now if self.end is None else self.end) - self.start)


@dataclass(frozen=True)
class RunTimeline:
    event_id: int
    now: int
    event: Event | None
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def bounds(self, now: int) -> tuple[int, int]:
        """The first moment and the last (now, while a step goes on) the timeline covers."""
        if not self.steps:
            return now, now
        first = min(step.start for step in self.steps)
        last = max(now if step.end is None else step.end for step in self.steps)
        return first, max(first, last)

    def total(self, kind: str, now: int) -> tuple[int, int]:
        """How many steps of a kind, and the seconds they took."""
        steps = [step for step in self.steps if step.kind == kind]
        return len(steps), sum(step.took(now) for step in steps)


def read_timeline(event_id: int, *, now: int) -> Callable[[Store], RunTimeline]:
    """The event's runs; for an event whose run asked an approval, the run its answer started too (the approved
    call and what the agent did after it), so the story reads on past the wait."""
    def read(store: Store) -> RunTimeline:
        event = store.event(event_id)
        if event is None:
            return RunTimeline(event_id, now, None)
        approvals = store.approvals_of_event(event.id)
        if event.source == "approval" and (answered := store.approval(event.source_id)) is not None:
            approvals.append(answered)
        steps = list(build_steps(store.history(event_id), store.journal_steps(event_id), store.tool_calls(event_id),
                                 approvals, store.event_replies(event_id), store.event_spend(event_id)))
        for approval in approvals:
            answer = store.find_event("approval", approval.request_id) if event.source != "approval" else None
            if answer is not None:
                steps += [replace(step, label=f"{step.label} · resumed by #{answer.id}") for step in build_steps(
                    store.history(answer.id), store.journal_steps(answer.id), store.tool_calls(answer.id), (),
                    store.event_replies(answer.id), store.event_spend(answer.id))]
        return RunTimeline(event_id, now, event, tuple(sorted(steps, key=_order)))

    return read


KIND_ORDER = {"run": 0, "retry": 1, "turn": 2, "step": 3, "call": 4, "approval": 5, "send": 6}


def _order(step: Step) -> tuple[int, int]:
    return step.start, KIND_ORDER.get(step.kind, 9)


def build_steps(history: Sequence[Attempt], journal: Sequence[JournalStep], calls: Sequence[ToolCallRecord],
                approvals: Sequence[Approval], replies: Sequence[OutboxMessage],
                spend: Sequence[SpendRow]) -> tuple[Step, ...]:
    steps = [*_runs(history), *_turns(journal, spend), *_calls(journal, calls, approvals),
             *(_approval(approval) for approval in approvals), *(_send(message) for message in replies),
             *(_other(step) for step in journal if not _is_turn(step) and not _is_call(step))]
    return tuple(sorted(steps, key=_order))


def _runs(history: Sequence[Attempt]) -> list[Step]:
    """Each run from its claim to the line that ended it (open while it runs), and before each claim after a
    failure, the wait for the retry."""
    steps: list[Step] = []
    attempt = 0
    failed_at: int | None = None
    for index, line in enumerate(history):
        if line.kind != "claim":
            continue
        attempt += 1
        if failed_at is not None:
            steps.append(Step("retry", failed_at, line.at, f"waited before attempt {attempt}", style="warning"))
        end = next((later for later in history[index + 1:] if later.kind in RUN_ENDS | {"claim"}), None)
        who = f"gen {line.gen if line.gen is not None else '-'} · {line.holder or '-'}"
        if end is None or end.kind == "claim":
            steps.append(Step("run", line.at, None if end is None else end.at, f"attempt {attempt} · {who}",
                              "running" if end is None else "ended unrecorded"))
            failed_at = None if end is None else end.at
            continue
        failed = end.kind in FAILED_ENDS
        outcome = "done" if end.kind == "finish" else f"{end.kind}: {_brief(end.detail or '')}".rstrip(": ")
        steps.append(Step("run", line.at, end.at, f"attempt {attempt} · {who}", outcome,
                          "error" if failed else ""))
        failed_at = end.at if failed else None
    return steps


def _is_turn(step: JournalStep) -> bool:
    return ":turn:" in step.idem_key


def _is_call(step: JournalStep) -> bool:
    return step.idem_key.startswith(APPROVED_STEP_PREFIX)


def _turns(journal: Sequence[JournalStep], spend: Sequence[SpendRow]) -> list[Step]:
    """The model turns: how long each call to the model took, which model answered and what it cost."""
    by_key: dict[str, list[SpendRow]] = {}
    for row in spend:
        if row.step_key:
            by_key.setdefault(row.step_key, []).append(row)
    steps = []
    for step in journal:
        if not _is_turn(step):
            continue
        conversation, _, number = step.idem_key.rpartition(":turn:")
        rows = by_key.get(step.idem_key, [])
        model = " · ".join(dict.fromkeys(row.model for row in rows))
        costs = [row.cost_nanos for row in rows]
        cost = "" if not rows else money(None if None in costs else sum(c or 0 for c in costs), unknown="no price")
        label = f"model turn {number}" + (f" · {model}" if model else "") + f" · {conversation}"
        steps.append(Step("turn", step.claimed_at, _committed(step), label,
                          ", ".join(part for part in (cost, _state(step)) if part)))
    return steps


def _committed(step: JournalStep) -> int | None:
    return step.committed_at if step.state == "committed" else (None if step.state == "claimed" else step.claimed_at)


def _state(step: JournalStep) -> str:
    words = {"claimed": "under way", "committed": "", "unknown": "outcome unknown"}.get(step.state, step.state)
    again = f"ran {step.executions}×" if step.executions > 1 else ""
    return ", ".join(part for part in (words, again) if part)


def _calls(journal: Sequence[JournalStep], calls: Sequence[ToolCallRecord],
           approvals: Sequence[Approval]) -> list[Step]:
    """Every tool call: one that ran is its journal step (how long it took), matched with the call the run
    recorded (the n-th step of a tool with its n-th allowed call; an approved one by its request id); one that
    did not run (asked, refused) is a moment, when the run recorded it."""
    by_request = {approval.request_id: approval for approval in approvals}
    asked_at = _turn_ends(journal)
    allowed: dict[str, list[ToolCallRecord]] = {}
    approved: dict[str, ToolCallRecord] = {}
    steps: list[Step] = []
    for call in calls:
        if call.decision == "allowed":
            allowed.setdefault(call.tool, []).append(call)
        elif call.request_id and call.decision in ("approved", "unknown"):
            approved[call.request_id] = call
        else:  # a moment: when the turn that asked for it ended (the record's own time is the run's finish)
            at = asked_at.get(call.use_id, call.at)
            steps.append(_call_step(call.tool, call.arguments, at, at, call))
    for step in journal:
        if not _is_call(step):
            continue
        parts = step.idem_key.split(":")
        if len(parts) >= 5 and parts[1].isdigit():  # tool:<event>:<tool>:<digest>:<n>
            tool = parts[2]
            queue = allowed.get(tool, [])
            record = queue.pop(0) if queue else None
            arguments = record.arguments if record is not None else None
        else:  # tool:<request id>: the call an approval stood for
            request_id = step.idem_key[len(APPROVED_STEP_PREFIX):]
            record = approved.pop(request_id, None)
            approval = by_request.get(request_id)
            tool = record.tool if record is not None else (approval.tool if approval and approval.tool else "?")
            arguments = record.arguments if record is not None else (approval.arguments if approval else None)
        steps.append(_call_step(tool, arguments, step.claimed_at, _committed(step), record, step))
    for left in [*(call for queue in allowed.values() for call in queue), *approved.values()]:
        steps.append(_call_step(left.tool, left.arguments, left.at, left.at, left))  # replayed: no step of its own
    return steps


def _turn_ends(journal: Sequence[JournalStep]) -> dict[str, int]:
    """Each tool_use id the model turns asked for, with the moment its turn ended."""
    ends: dict[str, int] = {}
    for step in journal:
        result = step.result if _is_turn(step) and isinstance(step.result, dict) else {}
        for block in result.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                ends[str(block.get("id"))] = _committed(step) or step.claimed_at
    return ends


def _call_step(tool: str, arguments: Any, start: int, end: int | None, record: ToolCallRecord | None,
               journal: JournalStep | None = None) -> Step:
    shown = "" if arguments is None else _brief(arguments_line(arguments), ARGUMENTS_CHARS)
    label = f"{tool}({shown})" + (f" · request {record.request_id}" if record and record.request_id else "")
    if record is None:
        outcome = _state(journal) if journal is not None else ""
        return Step("call", start, end, label, outcome or "done")
    decision = DECISION_WORDS.get(record.decision, record.decision)
    outcome = f"{decision}, {record.outcome}" + (f" ({_state(journal)})" if journal and _state(journal) else "")
    style = "error" if record.decision == "denied" or record.outcome == "error" else (
        "warning" if record.decision == "asked" else "")
    return Step("call", start, end, label, outcome, style)


def _approval(approval: Approval) -> Step:
    """The wait for the owner's answer: asked at, answered at (or still waiting), by whom."""
    asks = approval.action if approval.tool is None else \
        f"{approval.tool}({_brief(arguments_line(approval.arguments or {}), ARGUMENTS_CHARS)})"
    label = f"approval {approval.request_id} · {asks}"
    if approval.outcome is None:
        return Step("approval", approval.requested_at, None, label, "waiting for your answer", "warning")
    via = via_in_words(approval.answered_via)
    return Step("approval", approval.requested_at, approval.resolved_at, label,
                " ".join(part for part in (f"answered {approval.outcome}" if approval.outcome in ("yes", "no")
                                           else approval.outcome, via) if part),
                "" if approval.outcome == "yes" else "warning")


def _send(message: OutboxMessage) -> Step:
    """A reply from its queueing to its send (the outbox's gap and the channel's time)."""
    lane = "urgent " if message.urgent else ""
    label = f"{lane}reply #{message.id}: {_brief(message.body, ARGUMENTS_CHARS)}"
    if message.status == "sent":
        return Step("send", message.created_at, message.sent_at, label,
                    f"sent via {message.channel}" if message.channel else "sent")
    failed = message.status == "failed" or message.error is not None
    return Step("send", message.created_at, None, label,
                f"{message.status}" + (f" ({_brief(message.error or '')})" if message.error else ""),
                "error" if failed else "")


def _other(step: JournalStep) -> Step:
    return Step("step", step.claimed_at, _committed(step), step.idem_key, _state(step))


def _brief(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
