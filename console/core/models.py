"""Plain records the core hands out. No SQL, no Textual: every layer may import these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.core.summary import event_what

STATUSES = ("pending", "running", "done", "dead", "discarded")


@dataclass(frozen=True)
class Event:
    id: int
    source: str
    source_id: str
    payload: Any
    status: str
    attempts: int
    claim_gen: int | None
    error: str | None
    created_at: int = 0
    updated_at: int = 0
    next_attempt_at: int = 0
    duplicates: int = 0
    pruned_at: int | None = None  # when `prune` cleared its payload (the row and its key stay)
    dead_reason: str | None = None  # one of DEAD_REASONS once it died (kept if discarded)
    trace: str | None = None  # the traceparent its run is traced under (a delivery whose sender traces)
    failed_with: int | None = None  # the poison event its last batch failed on (it runs alone next)
    # Its payload as read is not what was stored (its checksum, statements.payload_checksum): payload is None, and a
    # claim refuses its run (dead, reason `damaged`).
    damaged: bool = False

    def what(self) -> str:
        """One line saying what the event is (console.core.summary): the events table's "what" column."""
        if self.damaged:
            return "payload damaged"
        return "" if self.pruned_at is not None else event_what(self.source, self.payload)

    def death_in_words(self) -> str | None:
        """Why a dead event died, as a sentence built from its fields (None unless it is dead)."""
        if self.status != "dead":
            return None
        return death_in_words(self.dead_reason, self.attempts, self.error)

    def batch_failure_in_words(self) -> str | None:
        """Why a batch-mate of a poison event is pending again, no attempt spent (None for any other event)."""
        if self.status != "pending" or self.failed_with is None:
            return None
        return f"{failed_with_batch(self.failed_with)}; runs alone next"


def failed_with_batch(poison_id: int) -> str:
    """What a batch-mate of poison_id went through: the run failed on that event, not on this one."""
    return f"failed with its batch (#{poison_id}, poison)"


# Why an event died (Event.dead_reason): its last attempt's run failed; its last attempt's worker lost the
# lease mid-run; or it was found waiting for a retry with no attempts left (max_attempts lowered meanwhile).
# What a damaged event's error says (the reason `damaged`).
PAYLOAD_DAMAGED = ("its payload does not match the checksum written when it was stored (the inbox file changed "
                   "under it: see `agent-console check`)")
# Or its payload was found damaged when it was claimed (its run refused, its row kept).
DEAD_REASONS = ("failed", "lost", "out_of_attempts", "unsent", "damaged")


def death_in_words(reason: str | None, attempts: int, error: str | None) -> str:
    """'failed 3 attempts; last error: boom', from the fields a death wrote."""
    tried = f"{attempts} attempt{'' if attempts == 1 else 's'}"
    last = error or "none recorded"
    if reason == "failed":
        return f"failed {tried}; last error: {last}"
    if reason == "lost":
        return f"{last}; out of attempts ({tried})"
    if reason == "out_of_attempts":
        return f"out of attempts ({tried}); last error: {last}"
    if reason == "damaged":
        return f"its run was refused: {last}"
    if reason == "unsent":
        return f"its approved call could not be sent before the approval's deadline: {last}"
    return last  # died before the reason had its own field: error holds the sentence it was given then


@dataclass(frozen=True)
class Attempt:
    """One line of an event's history: claim, finish, error, lost, dead, retry, discard, refusal, or model (a run
    went on with another model of the chain)."""

    event_id: int
    at: int
    kind: str
    holder: str | None
    gen: int | None
    detail: str | None


@dataclass(frozen=True)
class Lease:
    holder: str
    gen: int
    until: int
    acquired_at: int
    renewed_at: int

    def expires_in(self, now: int) -> int:
        return self.until - now

    def is_live(self, now: int) -> bool:
        return self.until >= now


@dataclass(frozen=True)
class RefusedFinish:
    """A write a run made after its generation had lost the lease, refused and recorded (fencing made visible).

    kind is 'finish' (the run's outcome), 'step' (claiming a journal step) or 'commit' (committing a
    step's result); detail names the step."""

    at: int
    holder: str
    gen: int
    event_ids: list[int]
    lease_holder: str | None
    lease_gen: int | None
    reason: str
    kind: str = "finish"
    detail: str | None = None


@dataclass(frozen=True)
class Timer:
    id: str
    due: int
    every: int | None
    cron: str | None
    tz: str | None
    payload: Any
    catch_up: str
    paused: bool
    done: bool
    last_fired_at: int | None
    origin: Any = None  # the run that set it (see MemoryEntry.origin); None: the owner's
    ends_at: int | None = None  # no occurrence fires at or after it (a schedule's expiry)


@dataclass(frozen=True)
class Approval:
    request_id: str
    action: str
    details: Any
    session_id: str | None
    requested_at: int
    expires_at: int
    outcome: str | None
    resolved_at: int | None
    event_id: int | None = None  # the event the request belongs to (its id is anchored on it)
    tool: str | None = None      # a tool call bound to this approval: exactly this runs on yes
    arguments: Any = None        # its canonical arguments
    sources: Any = None          # [{"event_id", "source", "source_id"}]: what started the run that asked
    answered_via: str | None = None  # console | cli | ntfy | telegram | api | expiry, once settled
    # Where the request came from: {"trusted": bool, "summary": "asked by a run that read untrusted content: ...",
    # "tainted_by": [...]} (None: asked before provenance was kept)
    origin: Any = None

    def seconds_left(self, now: int) -> int:
        return max(0, self.expires_at - now)


# What became of the call an answered approval stands for, once the event carrying the answer is dead: not run
# (its journal step never started), unknown (started, and its worker died before recording the result), done (run
# and recorded: only the report of it is missing), or None when no call was approved (a no, an expiry, a question).
STRANDED_CALLS = ("not_run", "unknown", "done")
_BRIEF_ERROR_CHARS = 120


@dataclass(frozen=True)
class StrandedAnswer:
    """An owner's answer whose resume cannot run: the event carrying it (source `approval`, source id = the
    request id) is dead, so the conversation that asked has not heard it and, on a yes, the approved call may
    not have happened. Read from the approvals row, the dead event and the call's journal step."""

    request_id: str
    outcome: str              # yes | no | expired
    action: str               # what the owner was asked (the approvals row's words)
    tool: str | None          # the call bound to the approval (None: a plain question)
    event_id: int             # the dead event carrying the answer
    asked_by: int | None      # the event whose run asked
    dead_reason: str | None
    attempts: int
    error: str | None
    died_at: int
    crashes: int              # claims lost to a dead or fenced worker since its last retry by hand
    call: str | None          # one of STRANDED_CALLS, or None when no call was approved

    def death(self) -> str:
        """Why its event died, in a few words: 'lost in 3 crashes', 'failed 3 attempts: boom'."""
        error = self.error or "none recorded"
        if len(error) > _BRIEF_ERROR_CHARS:
            error = error[: _BRIEF_ERROR_CHARS - 1] + "…"
        if self.dead_reason == "lost" and self.crashes >= self.attempts:
            return f"lost in {self.crashes} crash{'' if self.crashes == 1 else 'es'}"
        if self.dead_reason == "lost":
            return f"its worker died on its last attempt of {self.attempts}"
        if self.dead_reason == "failed":
            return f"failed {self.attempts} attempt{'' if self.attempts == 1 else 's'}: {error}"
        if self.dead_reason == "unsent":
            return f"its call could not be sent before the approval's deadline: {error}"
        return f"out of attempts ({self.attempts}): {error}"

    def in_words(self) -> str:
        """One line for a list of approvals (the console's pane, `status`, `show`)."""
        dead, retry = f"its event #{self.event_id} is dead ({self.death()})", f"retry #{self.event_id}"
        if self.call == "not_run":
            return f"approved, but not run: {dead} — {retry} to run it"
        if self.call == "unknown":
            return f"approved, but whether it ran is unknown: {dead}, and it died during the call — {retry} to " \
                   "finish it"
        if self.call == "done":
            return f"approved and run, but the conversation did not resume: {dead} — {retry} to resume it"
        said = {"yes": "answered yes", "no": "declined", "expired": "expired unanswered"}.get(self.outcome,
                                                                                            self.outcome)
        nothing = "" if self.outcome == "yes" else ", nothing run"
        return f"{said}{nothing}, but the conversation did not resume: {dead} — {retry} to resume it"

    def public(self) -> dict[str, Any]:
        """As `status --json` lists it: the fields, and the line the console and `status` print."""
        return {**{name: getattr(self, name) for name in self.__dataclass_fields__}, "in_words": self.in_words()}

    def notice(self) -> str:
        """The message that tells the owner, written when the event is parked dead."""
        asked = f"{self.action} (request {self.request_id})"
        carried = "the expiry" if self.outcome == "expired" else "your answer"
        dead = f"the event that carries {carried}, #{self.event_id}, is dead ({self.death()})"
        retry = f"`agent-console retry {self.event_id}`"
        if self.call == "not_run" and self.dead_reason == "unsent":
            return (f"Your yes to {asked} was not carried out: the call was not made, because its tool's server "
                    f"could not be reached before the approval's deadline ({self.error or 'no reason recorded'}). "
                    f"Nothing was done. {retry} runs it, once.")
        if self.call == "not_run":
            return f"Your yes to {asked} was not run: {dead}. Nothing was done. {retry} runs it, once."
        if self.call == "unknown":
            return (f"Your yes to {asked} may not have been carried out: {dead}, and its worker died during the "
                    f"call, before the result was recorded. {retry} sends it again under the same idempotency key "
                    f"if the tool is safe to repeat, and otherwise asks you first.")
        if self.call == "done":
            return (f"Your yes to {asked} was carried out, but the conversation did not resume to report it: "
                    f"{dead}. {retry} resumes it; the call is not run again.")
        if self.outcome == "yes":
            return f"Your yes to {asked} did not reach the conversation that asked: {dead}. {retry} resumes it."
        settled = f"Your no to {asked} stands" if self.outcome == "no" else f"{asked} expired unanswered"
        return (f"{settled} and nothing was run, but the conversation that asked did not resume: {dead}. {retry} "
                "resumes it; the call is not run.")


@dataclass(frozen=True)
class Batch:
    """What a channel sends: the held messages of one dispatch, under one idempotency key."""

    key: str
    bodies: list[str]
    urgent: bool = False
    attempt: int = 1
    message_ids: list[int] = field(default_factory=list)
    # Beside bodies: the approval each message announces, or None (empty when the batch was built by hand).
    approval_ids: list[str | None] = field(default_factory=list)
    # Beside bodies: the chat message each one answers ('<source>:<chat>:<message>'), or None.
    reply_tos: list[str | None] = field(default_factory=list)
    # Beside bodies: who may read each one (OWNER_ONLY: the owner's own direct channels only), or None (anyone).
    audiences: list[str | None] = field(default_factory=list)

    def owner_only(self, index: int) -> bool:
        """Whether message `index` may reach only the owner's own direct channels (see OWNER_ONLY)."""
        return index < len(self.audiences) and self.audiences[index] == OWNER_ONLY

    def for_others(self) -> Batch:
        """This batch as a channel that reaches others may send it: without its owner-only messages."""
        keep = [index for index in range(len(self.bodies)) if not self.owner_only(index)]

        def kept(values: list[Any]) -> list[Any]:
            return [values[index] for index in keep if index < len(values)]

        return Batch(self.key, kept(self.bodies), self.urgent, self.attempt, kept(self.message_ids),
                     kept(self.approval_ids), kept(self.reply_tos), kept(self.audiences))

    def approval_of(self, index: int) -> str | None:
        return self.approval_ids[index] if index < len(self.approval_ids) else None

    def reply_to_of(self, index: int) -> str | None:
        return self.reply_tos[index] if index < len(self.reply_tos) else None

    @property
    def text(self) -> str:
        return "\n\n".join(self.bodies)


@dataclass(frozen=True)
class OutboxMessage:
    id: int
    body: str
    urgent: bool
    created_at: int
    event_id: int | None
    status: str  # queued | sending | sent | failed
    sent_at: int | None
    batch_key: str | None
    channel: str | None
    error: str | None
    next_try_at: int | None
    approval_id: str | None = None  # the approval this message announces


@dataclass(frozen=True)
class JournalStep:
    idem_key: str
    state: str  # claimed | committed
    gen: int
    event_id: int | None
    claimed_at: int
    committed_at: int | None
    result: Any
    executions: int


@dataclass(frozen=True)
class ApprovalDraft:
    """An approval a run asks for. It is staged and enters the inbox with the run's fenced finish (with
    its saved session and expiry timer), or not at all: a run that crashes or is fenced leaves nothing
    half-asked, and its retry asks again under the same id."""

    request_id: str
    action: str
    expires_in: int
    details: Any = None
    session: Any = None  # saved under the request id; what a resumed run continues from
    event_id: int | None = None
    tool: str | None = None      # the exact tool call that runs on yes (None: a plain question)
    arguments: Any = None
    sources: Any = None          # what started the run that asks, for the owner to see
    origin: Any = None           # where the request came from (Approval.origin)


@dataclass(frozen=True)
class OutboxDraft:
    """A message a run says to the owner, staged until the run's fenced finish writes its outbox row (the
    finish files it under the run's first event, and under the chat it answers). announces: the request id of
    the approval it announces (a phone channel sends it as a card with Yes / No buttons)."""

    body: str
    urgent: bool = False
    announces: str | None = None
    # Who may read it: OWNER_ONLY (a run that read untrusted content and the owner's private data, or whose reply
    # may not go to its group) or None (every channel). answers: it may go as a reply into the chat or mail the run
    # answers (False: to the owner's direct chat instead).
    audience: str | None = None
    answers: bool = True


# A message only the owner's own direct channels may carry: the console, a file, a phone channel's direct chat with
# the owner (never a group), an ntfy topic; never an HTTP or apprise channel, a group chat or a reply by mail.
OWNER_ONLY = "owner"


@dataclass(frozen=True)
class CapNotice:
    """A notice to the owner that a cap was reached, queued by the run's finish unless one for the same key
    was queued within `window` seconds (None: ever)."""

    key: str
    text: str
    window: int | None


@dataclass(frozen=True)
class TimerDraft:
    """A timer a run sets; like an ApprovalDraft it is written by the run's fenced finish."""

    timer_id: str
    due: int
    payload: Any = None
    options: dict[str, Any] = field(default_factory=dict)  # add_timer's keywords: every, cron, tz, catch_up
    origin: Any = None  # the run that set it (MemoryEntry.origin): it fires with that run's trust


SCHEDULE_KINDS = ("once", "every", "cron")


@dataclass(frozen=True)
class ScheduleSpec:
    """What a schedule is, as the owner approves it (the gateway reads it from the `schedule` tool's arguments):
    once at `at`; every `every` seconds on the grid anchored at `at`; or `cron` in `tz`. Money in nano-USD."""

    id: str
    title: str
    instruction: str
    kind: str
    at: int | None = None
    every: int | None = None
    cron: str | None = None
    tz: str | None = None
    tools: tuple[str, ...] | None = None
    budget_occurrence_nanos: int | None = None
    budget_month_nanos: int | None = None
    only_if_changed: bool = False
    watch_sources: tuple[str, ...] = ()
    watch_tool: str | None = None
    watch_arguments: Mapping[str, Any] | None = None
    expires_at: int | None = None

    @property
    def recurring(self) -> bool:
        return self.kind != "once"


@dataclass(frozen=True)
class Schedule:
    """A stored schedule, with its timer's next occurrence (`next_due`, None once it fires no more)."""

    spec: ScheduleSpec
    state: str                # active | paused (as stored; shown_state adds expired and done)
    paused_reason: str | None
    origin: Any
    request_id: str | None
    created_at: int
    updated_at: int
    last_outcome: str | None
    last_at: int | None
    seen: Any
    expiry_told: bool
    budget_told: bool
    next_due: int | None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def trusted(self) -> bool:
        return origin_trusted(self.origin)

    def shown_state(self, now: int) -> str:
        """active, paused, expired (past its expiry: renew it to go on) or done (a one-off that fired)."""
        if self.spec.expires_at is not None and now >= self.spec.expires_at:
            return "expired"
        if self.next_due is None:
            return "done"
        return self.state


@dataclass(frozen=True)
class ScheduleDraft:
    """A schedule a run creates or changes (on the owner's yes, or unasked for an allowed one-off); written by
    the run's fenced finish with its timer."""

    spec: ScheduleSpec
    origin: Any = None
    request_id: str | None = None


@dataclass(frozen=True)
class ScheduleUpdate:
    """What one occurrence's run decided about its schedule before any model request, written by its fenced
    finish: how it went (ran, skipped, paused, gone), what it saw (only_if_changed's baseline), and a budget
    pause (told once: budget_told)."""

    schedule_id: str
    occurrence: int
    outcome: str
    seen: Any = None
    pause_reason: str | None = None
    budget_told: bool = False


AGENT_STATES = ("ready", "waiting", "paused")


@dataclass(frozen=True)
class RunOutcome:
    """Everything a run staged for the inbox, written by its fenced finish or not at all: what it says, the
    approvals it asks (with their sessions), the timers it sets, what it remembers or forgets, the record of its
    tool calls, how it ended for each event (notes: event id -> text) and the caps it reached."""

    messages: Sequence[OutboxDraft] = ()
    approvals: Sequence[ApprovalDraft] = ()
    timers: Sequence[TimerDraft] = ()
    notes: Mapping[int, str] = field(default_factory=dict)
    memory: Sequence[MemoryWrite] = ()
    tool_calls: Sequence[ToolCallRecord] = ()
    notices: Sequence[CapNotice] = ()
    schedules: Sequence[ScheduleDraft] = ()
    schedule_updates: Sequence[ScheduleUpdate] = ()


@dataclass(frozen=True)
class AgentState:
    """The agent as a whole: ready; waiting out the provider's back-pressure until `until`; or paused by a
    configuration the provider refuses. Written by the lease holder, read by any process."""

    state: str
    reason: str | None
    until: int | None
    since: int
    holder: str | None = None
    gen: int | None = None
    waits: int = 0
    notified: str | None = None
    # What lifts a pause besides a restart: a budget pause is {"budget": "daily"|"monthly", "limit_usd": float}
    # and lifts at `until` (the period rolls over) or as soon as that budget changes. The owner's own pause is
    # {"owner": true, "via": ...}: only the owner's resume lifts it.
    cause: Any = None

    def at(self, now: int) -> AgentState:
        """As it stands at `now`: a wait that is over, or a pause whose period has rolled over, reads as
        ready, whether or not an engine is left to say so."""
        if self.state in ("waiting", "paused") and self.until is not None and self.until <= now:
            return AgentState("ready", None, None, self.until, self.holder, self.gen, self.waits, self.notified)
        return self

    @property
    def owner_paused(self) -> bool:
        """Paused by the owner (/pause): it lasts until they resume it."""
        return self.state == "paused" and isinstance(self.cause, dict) and self.cause.get("owner") is True

    @property
    def budget(self) -> str | None:
        """The budget a budget pause waits on ('daily' or 'monthly'), else None."""
        cause = self.cause if isinstance(self.cause, dict) else {}
        kind = cause.get("budget")
        return kind if self.state == "paused" and isinstance(kind, str) else None

    def public(self, now: int) -> dict[str, Any]:
        """The `status --json` contract: {"state", "reason", "until"}."""
        current = self.at(now)
        return {"state": current.state, "reason": current.reason, "until": current.until}


@dataclass(frozen=True)
class ReplayGuard:
    """A delivery whose signature covers only its body (no signed id or timestamp): the same bytes
    seen from its source within `window` seconds are a replay, whatever id came with them."""

    digest: bytes  # SHA-256 of the raw body bytes
    window: int    # seconds


@dataclass(frozen=True)
class MemoryWrite:
    """A remember (value) or forget (value None) a run staged; written by its fenced finish."""

    key: str
    value: str | None
    event_id: int | None = None
    origin: Any = None  # the run that wrote it (MemoryEntry.origin)


@dataclass(frozen=True)
class MemoryEntry:
    key: str
    value: str
    updated_at: int
    event_id: int | None  # the event whose run wrote it; None when the owner did
    # The run that wrote it: {"trusted": bool, "event_id", "source", "source_id", "tainted_by": [...]}; None when
    # the owner wrote it by hand.
    origin: Any = None

    @property
    def trusted(self) -> bool:
        """Written by the owner, or by a run that had read nothing untrusted."""
        return origin_trusted(self.origin)

    @property
    def private(self) -> bool:
        """The owner's private data (docs/security.md, the confidentiality model): see origin_private."""
        return origin_private(self.origin)

    def origin_in_words(self) -> str:
        """'yours', 'from chat #12', or 'from a run that read untrusted content (stripe #12: ...)'."""
        return origin_in_words(self.origin)


def origin_trusted(origin: Any) -> bool:
    """Whether a note's or a timer's origin is trusted: None (the owner's own) is; anything unreadable is not."""
    if origin is None:
        return True
    return isinstance(origin, dict) and origin.get("trusted") is True


def origin_private(origin: Any) -> bool:
    """Whether a note or a timer holds the owner's private data: the owner's own, a trusted run's, or one written
    by a run that had read private data. Only an origin that says its run read none (`"private": false`) is not;
    one written before that was recorded counts as private."""
    if origin_trusted(origin) or not isinstance(origin, dict):
        return True
    return origin.get("private") is not False


def origin_in_words(origin: Any) -> str:
    """A note's or a timer's origin as the owner reads it (agent-console memory, the console)."""
    if origin is None:
        return "yours"
    if not isinstance(origin, dict):
        return "unknown origin (treated as untrusted)"
    run = " ".join(str(part) for part in (origin.get("source"), f"#{origin['event_id']}" if origin.get(
        "event_id") is not None else None) if part) or "a run"
    if origin.get("trusted") is True:
        return f"from {run}"
    tainted = [str(item) for item in origin.get("tainted_by") or []]
    return f"from {run}, a run that read untrusted content" + (f" ({'; '.join(tainted)})" if tainted else "")


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call of a run, for the event's transcript: what the policy decided and what came back."""

    event_id: int
    use_id: str
    tool: str
    arguments: Any
    decision: str  # allowed | asked | denied | unknown | approved | declined | expired
    outcome: str   # done | error | deferred | refused
    result: str | None = None
    request_id: str | None = None
    at: int = 0
    rule: str | None = None  # the policy rule that decided it: `allow: mcp__shop__lookup_*`, `default`, ...
    provenance: Any = None   # {"trusted": bool, "summary": str}: what the run that made it had read
    run: Any = None          # {"holder", "gen", "events"}: the run that made it
    made: bool = False       # it went out to the world (a journal step that stands: done, error or unknown)
    replayed: bool = False   # its journal step was made by an earlier attempt: its result was replayed, not made


@dataclass(frozen=True)
class AuditRow:
    """One row of the audit trail (core/audit.py): a tool call a run recorded (kind `call`), an approval's
    answer (`answer`), or the record of a prune (`pruned`). body is its content; hash chains it to the row
    before it."""

    seq: int
    at: int
    kind: str
    event_id: int | None
    body: dict[str, Any]
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class AuditCheck:
    """What verifying the audit trail found: the rows checked and the last one's hash, and the first row that
    breaks the chain (problem says how), or none."""

    rows: int
    head: str
    bad_seq: int | None = None
    problem: str | None = None

    @property
    def intact(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class SpendRow:
    """One model call as the spend ledger holds it. cost_nanos is what it cost once settled, else the worst
    case still held for it (reserved: the call is in flight, or never came back); None when its model has
    no price."""

    id: int
    at: int
    state: str  # reserved | settled
    event_id: int | None
    step_key: str | None
    holder: str | None
    gen: int | None
    run_at: int | None
    model: str
    cost_nanos: int | None
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int


@dataclass(frozen=True)
class UnpricedCall:
    """A model call whose cost (settled) or worst case (reserved) is unknown: its model had no price. What a
    price added later needs to price it: the model asked for and the one that answered (a call is priced at
    the dearer), the tokens billed, and for a reservation the prompt and output tokens it was worked out from
    (None for one made before they were kept)."""

    id: int
    state: str  # reserved | settled
    model: str  # the model that answered, once settled
    asked_model: str | None
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    prompt_tokens: int | None
    max_tokens: int | None


@dataclass(frozen=True)
class Budget:
    """A budget in force: usd 0 means no limit. source says where it came from (the inbox, where
    `agent-console budget` stores it, the config file, an environment variable, or the default)."""

    kind: str  # daily | monthly
    usd: float
    source: str
    set_at: int | None = None

    @property
    def limited(self) -> bool:
        return self.usd > 0


@dataclass(frozen=True)
class BudgetDefaults:
    """What the settings say: the budgets from the config file or the environment (with where each came
    from), and the owner's time zone, in which days and months roll over."""

    daily_usd: float = 0.0
    monthly_usd: float = 0.0
    daily_from: str = "default"
    monthly_from: str = "default"
    zone: str = "UTC"


@dataclass(frozen=True)
class SpendDecision:
    """The answer to a reservation: reservation_id when the call may be made; otherwise refused names the
    budget it would pass ('daily' or 'monthly'), with what is spent in that period (None: unknown, some
    call in it has no price) and when the period rolls over; or unpriced, when a budget is in force and
    the call's own worst case is unknown."""

    reservation_id: int | None
    refused: Budget | None = None
    spent_nanos: int | None = None
    until: int | None = None
    unpriced: bool = False


# What became of an answer from a phone. settled: it settled the approval; late: it came after the deadline
# and settled it as expired; already_answered: an outcome already stood (a second tap, a replayed body).
# The rest are ignored and change nothing: forged (no valid MAC), unknown (no such request), other_inbox
# (signed for another inbox on a shared topic), wrong_chat (a Telegram tap from a chat not the owner's),
# duplicate (the same service message or update id again).
PHONE_VERDICTS = ("settled", "late", "already_answered", "forged", "unknown", "other_inbox", "wrong_chat",
                  "duplicate")
PHONE_IGNORED = ("forged", "unknown", "other_inbox", "wrong_chat", "duplicate")


@dataclass(frozen=True)
class PhoneAnswer:
    verdict: str          # one of PHONE_VERDICTS
    outcome: str | None   # the outcome that stands (yes | no | expired), None when ignored


@dataclass(frozen=True)
class PhoneCard:
    """An approval card a phone channel sent, due to be replaced: it shows `shown` and should show `wanted`
    (an outcome, or 'again:<outcome>' after a tap on a settled approval)."""

    channel: str
    outbox_id: int
    ref: str              # the service's handle: Telegram "chat:message", ntfy sequence id
    request_id: str
    body: str             # the announcement as first sent
    action: str
    wanted: str
    shown: str | None
    answered_via: str | None
    tries: int


@dataclass(frozen=True)
class EventSearch:
    """One page of events matching a search, newest first. next_before: pass it as before_id to go on
    searching older events; None once the oldest event has been looked at."""

    events: list[Event]
    next_before: int | None


@dataclass(frozen=True)
class OutboxSearch:
    """One page of outbox messages matching a search, newest first; next_before as in EventSearch."""

    messages: list[OutboxMessage]
    next_before: int | None


@dataclass(frozen=True)
class ChatPairing:
    """A chat paired as the owner's (`agent-console telegram pair`): owner_id is the user who paired it, the
    only one trusted in it."""

    source: str
    chat_id: str
    owner_id: str
    kind: str  # private | group | supergroup (as the service says)
    title: str | None
    paired_at: int

    def public(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id, "owner_id": self.owner_id, "kind": self.kind, "title": self.title,
                "paired_at": self.paired_at}


@dataclass(frozen=True)
class ChatTake:
    """What one read of a chat source's listener stored: per event it could store (one the inbox refuses as too
    large is skipped and counted), whether it was new; and the chats not paired that are to be told (once an
    hour) that the bot is private."""

    stored: list[bool]
    tell: list[str]
