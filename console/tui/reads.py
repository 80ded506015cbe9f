"""What each pane reads, as one function of a Store (run on the engine's reader thread).

Every read here is bounded: a page of events, a few recent rows, counters kept by triggers.
Nothing scans the inbox, so a pane stays fast on a file with millions of events.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.core import (
    AgentState,
    Approval,
    Event,
    HeldMessage,
    Lease,
    OutboxMessage,
    RefusedFinish,
    Store,
    StrandedAnswer,
)
from console.core.inbox import sort_key
from console.core.models import BudgetDefaults
from console.core.tool_health import sandbox_words
from console.modelspec import ModelSpec, model_rows
from console.tui.transcript import Line, conversation_lines

SPARK_MINUTES = 30
RECENT = 8


ORDER_WORDS = {("id", True): "newest first", ("id", False): "oldest first", ("status", True): "by status ↓",
               ("status", False): "by status ↑", ("source", True): "by source ↓", ("source", False): "by source ↑"}
Key = tuple[Any, int]  # where an event stands in the filter's order (console.core.inbox.sort_key)


@dataclass(frozen=True)
class EventFilter:
    """Which events the pane shows, and in what order: by id (newest first, the default), status or source,
    each descending or ascending, newest first within a status or source when descending."""

    status: str | None = None
    source: str | None = None
    order: str = "id"
    descending: bool = True

    def describe(self) -> str:
        shown = f"{self.status or 'all'} · {self.source or 'all sources'}"
        return shown if (self.order, self.descending) == ("id", True) else \
            f"{shown} · {ORDER_WORDS[(self.order, self.descending)]}"

    def key(self, event: Event) -> Key:
        return sort_key(event, self.order)

    def run(self, store: Store, *, start: Key | None = None, inclusive: bool = False, backwards: bool = False,
            limit: int) -> list[Event]:
        return store.events_in_order(order=self.order, descending=self.descending, status=self.status,
                                     source=self.source, start=start, inclusive=inclusive, backwards=backwards,
                                     limit=limit)


@dataclass(frozen=True)
class EventsPage:
    events: list[Event]
    counts: dict[str, int]
    at_top: bool  # no event above the first row matches the filter: the page is live
    stranded: dict[int, StrandedAnswer] = field(default_factory=dict)  # dead answers on the page, by event id


def read_page(
    flt: EventFilter, *, top: Key | None, limit: int
) -> Callable[[Store], EventsPage]:
    """The page whose first row is the event at key `top`, or the first page when top is None."""

    def read(store: Store) -> EventsPage:
        events = flt.run(store, start=top, inclusive=True, limit=limit)
        at_top = top is None or not flt.run(store, start=top, backwards=True, limit=1)
        stranded = {event.id: answer for event in events if event.source == "approval" and event.status == "dead"
                    and (answer := store.stranded_answer(event.id)) is not None}
        return EventsPage(events, store.counts(), at_top, stranded)

    return read


def read_newer_top(flt: EventFilter, first: Key, rows: int) -> Callable[[Store], Key | None]:
    """The top of the window `rows` rows above first, or None when that reaches the first page."""

    def read(store: Store) -> Key | None:
        above = flt.run(store, start=first, backwards=True, limit=rows)
        if len(above) < rows:
            return None
        return flt.key(above[0])

    return read


def read_older_top(flt: EventFilter, last: Key, rows: int) -> Callable[[Store], Key | None]:
    """The key of the row just below last, if there is one (rows: how many to look at)."""

    def read(store: Store) -> Key | None:
        below = flt.run(store, start=last, limit=rows)
        return flt.key(below[0]) if below else None

    return read


def read_oldest_top(flt: EventFilter, rows: int) -> Callable[[Store], Key | None]:
    """The top of the last page."""

    def read(store: Store) -> Key | None:
        last_page = flt.run(store, backwards=True, limit=rows)
        return flt.key(last_page[0]) if last_page else None

    return read


@dataclass(frozen=True)
class LeaseView:
    now: int
    lease: Lease | None
    takeovers: int
    refused: int
    recent_refusals: list[RefusedFinish]
    log: list[tuple[int, str, str, int, str | None]]
    agent: AgentState | None = None  # as it stands at `now`
    tools: list[dict[str, Any]] = field(default_factory=list)  # each MCP server's health (status --json "tools")


def read_lease(now: int) -> Callable[[Store], LeaseView]:
    def read(store: Store) -> LeaseView:
        return LeaseView(
            now, store.lease(), store.takeover_count(), store.refused_finish_count(),
            store.refused_finishes(3), store.lease_log(3), store.agent_state().at(now), store.tool_health(),
        )

    return read


# The waiting approvals the approvals pane reads, soonest deadline first: more do not fit a pane, and reading every
# one on each reload made the console's memory and reloads grow with a flood of asked calls (the soak: the
# tool-call cap asks each call past it). How many wait in all is counted apart.
PENDING_WINDOW = 100


@dataclass(frozen=True)
class ApprovalsView:
    now: int
    pending: list[Approval]  # the soonest PENDING_WINDOW of them
    resolved: list[Approval]
    stranded: list[StrandedAnswer] = field(default_factory=list)  # answers whose event died before they resumed
    waiting: int | None = None  # how many wait in all (None: as many as pending holds)


@dataclass(frozen=True)
class ApprovalView:
    """One approval for its own screen: the row, and the conversation the asking run saved."""

    approval: Approval
    conversation: list[Line]
    request_words: str | None = None  # what the event that asked says in words (a chat's text), if it says any


def read_approval(request_id: str) -> Callable[[Store], ApprovalView | None]:
    def read(store: Store) -> ApprovalView | None:
        approval = store.approval(request_id)
        if approval is None:
            return None
        session = store.load_session(approval.session_id) if approval.session_id else None
        event = store.event(approval.event_id) if approval.event_id is not None else None
        payload = event.payload if event is not None and isinstance(event.payload, dict) else {}
        words = payload.get("text") if isinstance(payload.get("text"), str) else None
        return ApprovalView(approval, conversation_lines(session), words)

    return read


def read_approvals(now: int) -> Callable[[Store], ApprovalsView]:
    def read(store: Store) -> ApprovalsView:
        pending = store.pending_approvals(limit=PENDING_WINDOW)
        waiting = len(pending) if len(pending) < PENDING_WINDOW else store.pending_approval_count()
        return ApprovalsView(now, pending, store.resolved_approvals(RECENT), store.stranded_answers(limit=RECENT),
                             waiting)

    return read


@dataclass(frozen=True)
class OutboxView:
    now: int
    counts: dict[str, int]
    next_send_at: int | None
    last_send_at: int | None
    queued: list[OutboxMessage]
    sent: list[OutboxMessage]
    troubled: list[OutboxMessage] = field(default_factory=list)  # failed, or waiting to retry
    telegram: dict[str, Any] | None = None  # the Telegram channel's state (status --json "telegram")
    email: dict[str, Any] | None = None  # the [email] source's state (status --json "email")
    held: list[HeldMessage] = field(default_factory=list)  # the oldest held over the hourly cap (R releases)


def read_outbox(now: int) -> Callable[[Store], OutboxView]:
    def read(store: Store) -> OutboxView:
        sending = store.outbox_messages(status="sending", limit=RECENT)
        retrying = [m for m in sending if m.error is not None]
        return OutboxView(
            now,
            store.outbox_counts(),
            store.next_send_at(now=now),
            store.last_send_at(),
            store.outbox_messages(status="queued", limit=RECENT),
            store.outbox_messages(status="sent", limit=RECENT),
            retrying + store.outbox_messages(status="failed", limit=RECENT),
            store.chat_status("telegram"),
            store.mail_status(),
            store.held_messages(limit=RECENT),
        )

    return read


@dataclass(frozen=True)
class Activity:
    per_minute: list[int]
    counts: dict[str, int]
    last_60s: int = 0  # the rate shown beside the sparkline: a rolling minute, not the calendar one


def read_activity(now: int, minutes: int = SPARK_MINUTES) -> Callable[[Store], Activity]:
    """Events per minute over the last `minutes` minutes (the current minute last)."""

    def read(store: Store) -> Activity:
        this_minute = now - now % 60
        starts = [this_minute - 60 * back for back in range(minutes - 1, -1, -1)] + [this_minute + 60]
        *bounds, rolling_start = store.first_ids_at([*starts, now - 59])
        return Activity([b - a for a, b in itertools.pairwise(bounds)], store.counts(), bounds[-1] - rolling_start)

    return read


@dataclass(frozen=True)
class SpendView:
    """Today's spend on model calls (None: unknown, a model without a price) against the budgets in force
    (None: no limit) and where each came from; paused when the agent waits for a budget."""

    today_usd: float | None
    daily_budget_usd: float | None
    monthly_budget_usd: float | None = None
    daily_from: str = "default"
    monthly_from: str = "default"
    paused: bool = False


def read_spend(now: int, defaults: BudgetDefaults) -> Callable[[Store], SpendView]:
    def read(store: Store) -> SpendView:
        return _spend(store, now, defaults)

    return read


def _spend(store: Store, now: int, defaults: BudgetDefaults) -> SpendView:
    summary = store.spend_summary(defaults, now=now)
    return SpendView(summary["today_usd"], summary["daily_budget_usd"], summary["monthly_budget_usd"],
                     summary["daily_budget_from"], summary["monthly_budget_from"],
                     store.agent_state().at(now).budget is not None)


@dataclass(frozen=True)
class HeaderFacts:
    """What the header shows from the file: today's spend, the lease (is anyone working this inbox?) and how
    many approvals wait for an answer."""

    spend: SpendView
    lease: Lease | None
    waiting: int
    # MCP servers down or starting, running bare or refused a host, as the lease holder recorded
    tools_not_up: tuple[dict[str, Any], ...] = ()
    models: tuple[dict[str, Any], ...] = ()  # the chain of models as it stands (modelspec.model_rows)
    channels_down: tuple[ChannelTrouble, ...] = ()  # phone and e-mail channels paused or offline


# The states of a chat or mail source (core/chats.py HEALTH_STATES) that stop it: the owner must act (a refused
# token or password) or the service is out of reach. "conflict" and "waiting" pass by themselves.
CHANNEL_DOWN = ("paused", "offline")
CHANNEL_NAMES = {"telegram": "Telegram", "email": "E-mail"}


@dataclass(frozen=True)
class ChannelTrouble:
    source: str  # telegram | email
    state: str
    reason: str

    def title(self) -> str:
        return f"{CHANNEL_NAMES.get(self.source, self.source)} {self.state}"


def channels_down(store: Store) -> tuple[ChannelTrouble, ...]:
    """The phone and mail sources whose listener says they stopped, with the reason whole."""
    down = []
    for source in CHANNEL_NAMES:
        state, reason = store.chat_health(source)
        if state in CHANNEL_DOWN:
            down.append(ChannelTrouble(source, state, reason or "no reason recorded"))
    return tuple(down)


def read_header(now: int, defaults: BudgetDefaults, chain: Sequence[ModelSpec] = ()) -> Callable[[Store], HeaderFacts]:
    def read(store: Store) -> HeaderFacts:
        return HeaderFacts(_spend(store, now, defaults), store.lease(), store.pending_approval_count(),
                           tuple(tool for tool in store.tool_health()
                                 if tool["state"] != "up" or sandbox_words(tool)),
                           tuple(model_rows(chain, store.model_health(), now=now)) if chain else (),
                           channels_down(store))

    return read
