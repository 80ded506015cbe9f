"""The worker: acquire the lease, claim a batch, run the agent, finish, renewing the lease meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from time import monotonic
from typing import TypeVar

from console import telemetry
from console.agents.base import Agent, RunContext
from console.agents.errors import AgentPaused, AgentUnavailable, AnswerWaits, EventFailed, ProviderBusy
from console.core import (
    AgentState,
    Event,
    Lease,
    RunOutcome,
    StaleGeneration,
    Store,
    StoreUnavailable,
    conversation_key,
)
from console.redact import redact_urls
from console.runtime.host import ServiceHost, service_loop
from console.timefmt import span

DAY = 86_400  # the digest carries the trail's head when a row was written within the last day
log = logging.getLogger("agent_console.worker")

T = TypeVar("T")

# How long the agent waits out back-pressure the provider did not size (no retry-after): 30 s, doubling while
# it keeps pushing back, up to 15 minutes. Any wait, sized or not, is at least 1 s and at most an hour.
DEFAULT_WAIT = 30
MAX_DEFAULT_WAIT = 900
MAX_WAIT = 3600
# An MCP server's health as the gateway tells it (console.agents.tools.ToolGateway.health): state, reason, its
# sandbox ("on" | "off" | "remote"), and the hosts its egress proxy refused with their counts since the hub started.
ToolHealth = tuple[str, str | None, str | None, tuple[tuple[str, int], ...]]


def utc_time(when: int) -> str:
    """A moment as the log writes it: ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


def wait_seconds(retry_after: float | None, waits_before: int) -> int:
    """The wait for one push-back: the provider's retry-after when it gave one, else the default, doubled
    for each wait just before it."""
    if retry_after is None:
        return int(min(MAX_DEFAULT_WAIT, DEFAULT_WAIT * 2 ** min(waits_before, 10)))
    return max(1, min(MAX_WAIT, math.ceil(retry_after)))


def one_conversation(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """A claimed batch cut to the conversation of its first event (core.conversation_key: one chat, one e-mail
    sender, or none at all), and the rest: a run never mixes chats, so its reply can go back to where every one of
    its events came from (the owner's private question is never answered in a group it was batched with)."""
    if not events:
        return events, []
    first = conversation_key(events[0].source, events[0].source_id, events[0].payload)
    mine = [e for e in events if conversation_key(e.source, e.source_id, e.payload) == first]
    return mine, [e for e in events if conversation_key(e.source, e.source_id, e.payload) != first]


class Worker:
    def __init__(self, host: ServiceHost, agent: Agent) -> None:
        self.host = host
        self.agent = agent
        self.gen: int | None = None
        # Until when (the inbox's clock) the lease this worker holds lasts, as its last acquire or renewal set it;
        # None while it holds none. What a listener bounds its long poll by: never past the lease it was opened under.
        self.held_until: int | None = None
        self.stalled = False
        self.runs = 0
        self.holds = 0  # passes that claimed nothing because the agent waits or is paused
        self._agent: AgentState | None = None  # as the gate last read it
        self._tool_health: dict[str, ToolHealth] = {}  # as last stored
        self._refused_handed: dict[str, dict[str, int]] = {}  # each hub count of refused hosts already stored
        self._tool_watch: asyncio.Task[None] | None = None  # records the MCP servers' health as it changes
        self._tools_changed: asyncio.Event | None = None
        self._current: asyncio.Task[None] | None = None
        self._lost_lease = False
        self._abandoned_gen: int | None = None  # the generation whose run a stop stopped waiting for
        self._renewed_at = 0
        self._stall_wake: asyncio.Event | None = None  # one for every run: each registered event costs every wake()
        self._loop_done: asyncio.Event | None = None  # set when run() has left its loop
        self._standby_seen: tuple[str, int] | None = None  # the lease (holder, gen) last reported on standby

    @property
    def busy(self) -> bool:
        return self._current is not None and not self._current.done()

    async def run(self) -> None:
        self._loop_done = asyncio.Event()
        try:
            await service_loop(self.host, "worker", self._tick)
        finally:
            if self._tool_watch is not None:
                self._tool_watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._tool_watch
            self._loop_done.set()

    async def _tick(self) -> float | None:
        """One pass; returns how long to idle, or None to go again at once."""
        host = self.host
        holder = host.holder
        if self.stalled:
            host.set_mode("stalled")
            return host.idle_cap
        now = host.clock.now()
        if self.gen is not None and now - self._renewed_at < max(1, host.settings.lease_ttl // 3):
            gen: int | None = self.gen  # renewed recently; claim_batch re-checks the lease anyway
        else:
            gen = await host.on("writer", lambda store: store.acquire(holder, now=now))
            self._renewed_at = now
            self.held_until = None if gen is None else now + host.settings.lease_ttl
        if gen is None:
            if self.gen is not None:
                log.info("lost the lease (generation %s)", self.gen)
            self.gen = None
            lease = await host.read(lambda store: store.lease())
            if self.stalled:  # stalled while this pass was at the inbox: it says so, not standby
                host.set_mode("stalled")
                return host.idle_cap
            self._standing_by(lease)
            return host.seconds_until(None if lease is None else lease.until + 1)
        if gen != self.gen:
            log.info("holding the lease as generation %s", gen)
            self.gen = gen
            host.publish("lease", f"generation {gen}")
            self._watch_tool_health()
        if self.stalled:  # stalled while this pass was at the inbox: it claims nothing (the lease it holds lapses)
            host.set_mode("stalled")
            return host.idle_cap
        host.set_mode("active")
        if host.stopping:
            return None  # shutdown releases this generation; a claim now would only count an attempt
        hold = await self._agent_gate(gen, now)
        if hold is not None:
            self.holds += 1
            return hold
        # Stalled on the way here (during the agent's gate, or while the claim waited behind other writes): no
        # claim. Looked at on the writer's thread just before the claim, not before the await: the claim may
        # wait there behind another write, and a stall pressed meanwhile must still stop it.
        events = await host.on("writer", lambda store: [] if self.stalled else store.claim_batch(holder, gen, now=now))
        if host.stopping:
            return None  # no run may start now: shutdown's release returns these events to pending
        if self.stalled and not events:  # it claims nothing (the lease it holds lapses)
            host.set_mode("stalled")
            return host.idle_cap
        if not events:
            retry_at = await host.read(lambda store: store.next_retry_at())
            return host.seconds_until(retry_at)
        events, others = one_conversation(events)
        if others:  # another chat's messages, claimed with these: each conversation is a run of its own
            await self._hand_back(gen, {event.id: "another conversation's: it runs on its own" for event in others})
        host.publish("events", f"claimed {len(events)}")
        self._current = asyncio.create_task(self._run(gen, events))
        try:
            await asyncio.shield(self._current)
        finally:
            if self._current.done():
                self._current = None
        return None

    def _standing_by(self, lease: Lease | None) -> None:
        """Stand by, and say once per holder and generation who holds the lease and until when."""
        host = self.host
        seen = None if lease is None else (lease.holder, lease.gen)
        if host.mode != "standby" or seen != self._standby_seen:
            self._standby_seen = seen
            if lease is not None:
                left = max(0, lease.until - host.clock.now())
                log.info("standby: the lease is held by %s, generation %s, until %s (%s from now)", lease.holder,
                         lease.gen, utc_time(lease.until), span(left))
        host.set_mode("standby")

    async def _run(self, gen: int, events: list[Event]) -> None:
        host = self.host
        holder = host.holder
        ids = [event.id for event in events]
        self._lost_lease = False
        self.runs += 1
        log.info("run %s: %s event(s) %s under generation %s", self.runs, len(events), ids, gen)
        host.publish("run", f"started {ids}")
        started = host.clock.now()
        began = monotonic()
        fence = threading.Event()  # set once the lease is gone: the run's next step, ask or say raises
        renewer = asyncio.create_task(self._keep_renewing(gen, fence))

        contexts: list[RunContext] = []  # kept even when the run raises: what it deferred is still unrun

        def do_run(store: Store) -> RunContext:
            ctx = RunContext(store, events, started, holder, gen, host.settings.approval_expiry,
                             fence=fence, clock=host.clock.now)
            contexts.append(ctx)
            # Under a sender's trace when a delivery brought one; linked to the spans that stored the others.
            parent, links = telemetry.parent_and_links([event.trace for event in events])
            with telemetry.run_span(self.agent.name, event_ids=ids, sources=[event.source for event in events],
                                    holder=holder, generation=gen, parent=parent, links=links) as span:
                try:
                    self.agent.run(ctx)
                    if any(_is_digest(event) for event in events):
                        # The trail's head reaches the owner with the daily digest, from the runtime, whatever the
                        # agent (or its model) wrote: kept elsewhere, it pins every row up to it (issue 31).
                        pin = store.audit_digest_line(since=started - DAY)
                        if pin is not None:
                            ctx.say(pin)
                finally:  # the agents side judges trust (the runtime may not): it leaves its verdict on ctx
                    if ctx.tainted_by is not None:
                        span.set_many({"agent_console.trusted": not ctx.tainted_by,
                                       "agent_console.tainted_by": ctx.tainted_by or None})
                span.set_many({"agent_console.journal.replayed_steps": len(ctx.replayed_steps) or None,
                               "agent_console.tool.calls": len(ctx.tool_log) or None})
            return ctx

        error: str | None = None
        blame: int | None = None  # the event the run failed on, when the agent named one (a poison event)
        not_sent = False  # blame is an answer whose approved call could not be sent: it waits, uncharged
        staged = RunOutcome()
        unavailable: AgentUnavailable | None = None
        try:
            staged = (await host.on("runner", do_run)).staged()
        except StaleGeneration as exc:
            error = f"fenced: {exc}"
            log.warning("run %s stopped: %s", self.runs, exc)
        except AgentUnavailable as exc:  # the provider's trouble, not the events': they keep their attempts
            unavailable = exc
        except Exception as exc:
            error = redact_urls(f"{type(exc).__name__}: {exc}")  # it is stored and shown: no credentials
            blame = exc.event_id if isinstance(exc, EventFailed) else None
            not_sent = isinstance(exc, AnswerWaits)
            log.warning("run %s failed: %s%s", self.runs, error,
                        "; the owner's yes is kept and tried again while the server comes back" if not_sent else "")
            # The calls it made in the world stand (journalled): its failed finish writes them to the audit trail.
            staged = RunOutcome(tool_calls=list(contexts[0].tool_log)) if contexts else RunOutcome()
        finally:
            renewer.cancel()
            try:
                await renewer
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # a renewal bug must not abandon the run's events as `running`
                host.note_error(f"lease renewal failed: {type(exc).__name__}: {exc}")
        if self.stalled and self._stall_wake is None:
            self._stall_wake = host.wake_event()
        while self.stalled and not host.stopping:  # a stalled worker holds its finish, like a closed lid
            assert self._stall_wake is not None
            await host.sleep(self._stall_wake, host.idle_cap)
        if gen == self._abandoned_gen:
            # This engine stopped waiting for the run and released its lease, which put its events back to pending
            # (the owner's quit, not a lost lease): there is nothing to finish, and no fencing to record.
            log.warning("run %s ended after its engine stopped waiting for it: not finished (its events were "
                        "pending again already)", self.runs)
            return
        if self._lost_lease:
            # The finish is still tried: the inbox refuses it and records the refusal, so the console's
            # count of fenced writes is true. Nothing the run staged is written.
            host.note_error(f"run {self.runs}: lease lost mid-run; its finish will be refused")
        elif unavailable is not None:
            await self._hold_back(gen, ids, unavailable)
            return
        else:
            deferred = contexts[0].deferred if contexts else {}
            if deferred:
                await self._hand_back(gen, deferred)
                ids = [event_id for event_id in ids if event_id not in deferred]
        finished = await self._finish(gen, ids, staged, error, blame, not_sent)
        if finished is None:
            return  # stopping: the lease's release returns the events to pending
        if not finished:
            host.note_error(f"run {self.runs}: finish refused (generation {gen} was fenced off)")
        else:
            said = len(staged.messages)
            log.info("run %s %s", self.runs, "failed" if error else f"done, {said} message(s)")
        if error:
            host.note_run_error(error)
        outcome = "fenced" if not finished else "failed" if error else "done"
        telemetry.count("agent_console.runs", "{run}", "Runs by outcome", {"agent_console.run.outcome": outcome})
        telemetry.record("agent_console.run.duration", "s", "Wall time of each run", monotonic() - began,
                         {"agent_console.run.outcome": outcome})
        if not finished:
            telemetry.count("agent_console.refused_writes", "{write}", "Writes refused by the lease fence", {})
        if finished:
            await self._agent_worked(gen)
        await self._record_tool_health(gen)
        host.publish("run", "finished" if finished and not error else "failed")
        host.publish("events", "finished")
        host.publish("outbox", "queued")
        host.wake()

    async def _finish(
        self, gen: int, ids: list[int], staged: RunOutcome, error: str | None, blame: int | None,
        not_sent: bool = False,
    ) -> bool | None:
        """Record the run's outcome, trying again until the inbox takes it; None if the engine stops first.

        Giving up instead would leave the events `running` under a generation this worker keeps renewing,
        where no claim ever recovers them. While it tries, the lease is not renewed: if the inbox stays
        unwritable past the TTL, the finish is refused and the next generation recovers the events.
        """
        host = self.host
        pause = 0.05
        while True:
            try:
                return await host.on("writer", self._finishing(gen, ids, staged, error, blame, not_sent,
                                                               host.clock.now()))
            except StoreUnavailable as exc:
                host.note_error(f"run {self.runs}: could not record its outcome ({exc}); trying again")
            except Exception as exc:  # the outcome itself cannot be stored: record the run as failed instead
                host.note_error(f"run {self.runs}: could not record its outcome: {type(exc).__name__}: {exc}")
                error, staged = f"could not record the run's outcome ({type(exc).__name__})", RunOutcome()
                blame, not_sent = None, False  # every event's failure now, not the poison event's
            if host.stopping:
                return None
            await asyncio.sleep(pause)  # a back-off between attempts, not a wait for a result
            pause = min(pause * 2, host.idle_cap)

    def _finishing(
        self, gen: int, ids: list[int], staged: RunOutcome, error: str | None, blame: int | None, not_sent: bool,
        now: int,
    ) -> Callable[[Store], bool]:
        holder = self.host.holder
        # A failed run's outputs are dropped (its retry produces them again), but for the calls it made, which the
        # audit trail records with the failure.
        outcome = RunOutcome(tool_calls=staged.tool_calls) if error else staged
        return lambda store: store.finish_run(holder, gen, ids, outcome, now=now, error=error, blame=blame,
                                              not_sent=not_sent)

    # --- the agent as a whole: waiting out back-pressure, paused by a refused configuration ----------------
    async def _agent_gate(self, gen: int, now: int) -> float | None:
        """How long to hold off claiming while the agent waits or is paused, or None to claim now.

        Read from the inbox every pass, so what the console and `status` show is what the worker obeys. A
        pause set by another engine or an earlier generation (this engine restarted, or lost the lease and
        took it back) is lifted: the configuration may have changed, and if not the first run pauses again
        without telling the owner twice. A budget pause lifts on its own when its day or month rolls over in
        the owner's time zone, or as soon as that budget changes (`agent-console budget` from anywhere
        commits to the inbox, which wakes this pass), whoever set it."""
        host = self.host
        state = await host.read(lambda store: store.agent_state())
        self._agent = state
        if state.budget is not None:
            defaults = host.settings.budget_defaults()
            kind, cause = state.budget, state.cause if isinstance(state.cause, dict) else {}
            # A pause because the spend is unknown (a call without a price) is also lifted for a new engine or
            # generation, like a configuration's: a price may have been added, and the next call re-prices.
            unknown_by_earlier = bool(cause.get("unknown")) and (state.holder, state.gen) != (host.holder, gen)
            if not unknown_by_earlier and not await host.read(
                    lambda store: store.budget_pause_lifted(state, defaults, now=now)):
                return host.seconds_until(state.until)  # woken sooner by any commit, a raised budget's too
            if cause.get("unknown") and await host.read(
                    lambda store: store.budgets(defaults)[kind].usd != cause.get("limit_usd")):
                # The owner changed the budget knowing the spend was unknown: those calls stop the agent no more.
                holder = host.holder
                await host.on("writer", lambda store: store.accept_unknown_spend(holder, gen, kind, now=now))
            await self._lift_pause(gen, now, f"the {state.budget} budget changed or its period rolled over")
            return None
        if state.owner_paused:
            return host.idle_cap  # until the owner resumes it (that commit wakes this pass)
        if state.state == "paused":
            if (state.holder, state.gen) == (host.holder, gen):
                return host.idle_cap
            await self._lift_pause(gen, now, f"it was paused ({state.reason}) by an earlier generation")
            return None
        if state.state == "waiting" and state.until is not None and state.until > now:
            return host.seconds_until(state.until)
        return None

    async def _lift_pause(self, gen: int, now: int, why: str) -> None:
        host = self.host
        holder = host.holder
        if await host.on("writer", lambda store: store.set_agent_state(holder, gen, "ready", now=now)):
            log.info("the agent is ready again under generation %s: %s", gen, why)
            host.publish("lease", "agent ready")
            self._agent = await host.read(lambda store: store.agent_state())

    async def _hold_back(self, gen: int, ids: list[int], unavailable: AgentUnavailable) -> None:
        """The provider cannot take the run: its events go back to pending unrun (no attempt spent) and the
        agent waits (back-pressure) or pauses (a configuration the provider refuses, with one urgent
        message to the owner). Nothing is claimed until the wait ends or the engine restarts."""
        host = self.host
        holder = host.holder
        now = host.clock.now()
        reason = str(unavailable)
        if isinstance(unavailable, ProviderBusy):
            before = self._agent.waits if self._agent is not None and self._agent.state == "waiting" else 0
            seconds = wait_seconds(unavailable.retry_after, before)
            until = now + seconds

            def wait(store: Store) -> bool:
                store.unclaim(holder, gen, ids, now=now, reason=f"not run: {reason}")
                return store.set_agent_state(holder, gen, "waiting", now=now, reason=reason, until=until)

            held = await self._write_until_stored(wait, "that the agent waits")
            what = f"the agent waits {seconds} s"
        else:
            paused = unavailable if isinstance(unavailable, AgentPaused) else None
            notice = (paused.notice if paused is not None and paused.notice else
                      f"The agent is paused: {reason}. Nothing runs, and no event loses an attempt, until the "
                      f"configuration is fixed and the engine restarted.")
            key = paused.notice_key if paused is not None else reason
            lifts_at = paused.until if paused is not None else None
            cause = paused.cause if paused is not None else None

            def pause(store: Store) -> bool:
                store.unclaim(holder, gen, ids, now=now, reason=f"not run: {reason}")
                return store.set_agent_state(holder, gen, "paused", now=now, reason=reason, notice=notice,
                                             notice_key=key, until=lifts_at, cause=cause)

            held = await self._write_until_stored(pause, "that the agent is paused")
            what = ("the agent is paused until the engine restarts" if lifts_at is None else
                    f"the agent is paused for {span(lifts_at - now)}, or until the budget is raised")
        if held:
            host.note_error(f"run {self.runs}: {reason}; {len(ids)} event(s) back to pending unrun, {what}")
        host.publish("lease", "agent waiting" if isinstance(unavailable, ProviderBusy) else "agent paused")
        host.publish("run", "held back")
        host.publish("events", "handed back")
        host.publish("outbox", "queued")
        host.wake()

    async def _hand_back(self, gen: int, deferred: dict[int, str]) -> None:
        """Events the agent left unrun (they did not fit one model call) go back to pending, attempt not spent."""
        holder, now = self.host.holder, self.host.clock.now()
        by_reason: dict[str, list[int]] = {}
        for event_id, reason in deferred.items():
            by_reason.setdefault(reason, []).append(event_id)

        def hand_back(store: Store) -> bool:
            return all([store.unclaim(holder, gen, ids, now=now, reason=reason) for reason, ids in by_reason.items()])

        await self._write_until_stored(hand_back, "the events it handed back")
        log.info("run %s: %s event(s) handed back for a later run", self.runs, len(deferred))

    def _watch_tool_health(self) -> None:
        """On taking the lease: record the MCP servers' health now, and again whenever it changes, not only
        after a run (a server that cannot start would otherwise show only once a run had gone without it)."""
        self._tool_health = {}  # a generation of its own: it writes what it sees, whatever the last holder wrote
        if self._tool_watch is None:  # once per worker: the servers, once started, stay up across generations
            self._tools_changed = asyncio.Event()
            self._tool_watch = asyncio.create_task(self._keep_tool_health(self._tools_changed))
        elif self._tools_changed is not None:
            self._tools_changed.set()

    async def _keep_tool_health(self, changed: asyncio.Event) -> None:
        # Duck-typed as in _record_tool_health: the gateway (console.agents.gateway.ToolGateway) starts the servers
        # and tells of each change from the hub's thread.
        tools = getattr(self.agent, "tools", None)
        start, watch = getattr(tools, "start_servers", None), getattr(tools, "watch_health", None)
        if not callable(start) or not callable(watch):
            return
        loop = asyncio.get_running_loop()

        def tell() -> None:  # on the hub's thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: the engine is gone
                loop.call_soon_threadsafe(changed.set)

        try:
            if not await asyncio.to_thread(start):  # bounded by the servers' connect and list timeouts
                return  # no MCP server, or only the example shop, which starts on first use
        except Exception as exc:  # a run that needs the servers meets the same trouble and says it to the model
            self.host.note_error(f"starting the MCP servers: {type(exc).__name__}: {exc}")
            return
        watch(tell)  # what changes from here is recorded; what changed before is read just below
        while not self.host.stopping:
            changed.clear()
            if self.gen is not None:
                try:
                    await self._record_tool_health(self.gen)
                except Exception as exc:  # say it, keep watching: the next change records it again
                    self.host.note_error(f"recording the MCP servers' health: {type(exc).__name__}: {exc}")
            await changed.wait()

    async def _record_tool_health(self, gen: int) -> None:
        """Store each MCP server's state when it changed since the last run (status --json "tools", the
        console): the hub lives in this process, so nobody else can tell that a server is down."""
        # Duck-typed: an agent with MCP tools has a gateway (console.agents.gateway.ToolGateway.health), which
        # this room may not import; an agent without one has nothing to say.
        read_health = getattr(getattr(self.agent, "tools", None), "health", None)
        if not callable(read_health):
            return
        health: dict[str, ToolHealth] = await asyncio.to_thread(read_health)  # its lock waits on a start
        changed = {server: said for server, said in health.items() if self._tool_health.get(server) != said}
        if not changed:
            return
        holder, now = self.host.holder, self.host.clock.now()
        # The hub counts refused connections since it started; the store adds what it has not been given yet.
        more = {server: {host: n - self._refused_handed.get(server, {}).get(host, 0)
                         for host, n in said[3] if n > self._refused_handed.get(server, {}).get(host, 0)}
                for server, said in changed.items()}

        def record(store: Store) -> bool:
            return all([store.set_tool_health(holder, gen, server, state, reason, now=now, sandbox=sandbox,
                                              refused=more[server])
                        for server, (state, reason, sandbox, _refused) in changed.items()])

        if await self._write_until_stored(record, "the MCP servers' health"):
            self._tool_health.update(changed)
            self._refused_handed.update({server: dict(said[3]) for server, said in changed.items()})
            for server, (state, reason, _sandbox, _refused) in changed.items():
                if state == "down":
                    log.warning("MCP server %s is down: %s", server, reason)
            self.host.publish("lease", "tool health")

    async def _agent_worked(self, gen: int) -> None:
        """A run the provider took: the agent is ready, and a later pause of the same configuration is news."""
        state = self._agent
        if state is None or (state.state == "ready" and state.notified is None):
            return
        holder, now = self.host.holder, self.host.clock.now()
        await self._write_until_stored(lambda store: store.set_agent_state(holder, gen, "ready", now=now, worked=True),
                                       "that the agent is ready")
        self._agent = None
        self.host.publish("lease", "agent ready")

    async def _write_until_stored(self, write: Callable[[Store], T], what: str) -> T | None:
        """One write, tried again while the inbox is busy; None if the engine stops first."""
        host = self.host
        pause = 0.05
        while True:
            try:
                return await host.on("writer", write)
            except StoreUnavailable as exc:
                host.note_error(f"run {self.runs}: could not record {what} ({exc}); trying again")
            if host.stopping:
                return None
            await asyncio.sleep(pause)  # a back-off between attempts, not a wait for a result
            pause = min(pause * 2, host.idle_cap)

    async def _keep_renewing(self, gen: int, fence: threading.Event) -> None:
        """Renew every TTL/3 during a long agent call; a refusal means the lease is gone (lapsed, or
        another worker took over): the fence stops the run at its next step."""
        host = self.host
        interval = max(0.05, host.settings.lease_ttl / 3)
        while True:
            await asyncio.sleep(interval)  # a renewal period, not a wait for a result
            if self.stalled:
                continue
            now = host.clock.now()
            try:
                renewed = await host.on("writer", self._renewal(gen, now))
            except StoreUnavailable as exc:  # try again next period; the run must not die of it
                host.note_error(f"could not renew the lease: {exc}")
                continue
            if not renewed:
                self._lost_lease = True
                self.held_until = None
                fence.set()
                host.wake()  # a listener's long poll under this lease ends now
                return
            if self.gen == gen:
                self.held_until = now + host.settings.lease_ttl

    def _renewal(self, gen: int, now: int) -> Callable[[Store], bool]:
        holder = self.host.holder
        return lambda store: store.renew(holder, gen, now=now)

    async def shutdown(self, grace: float) -> None:
        """Let the current run finish for up to `grace` seconds, then release the lease."""
        host = self.host
        self.stalled = False
        abandoned = False
        if self._current is not None and not self._current.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._current), grace)
            except TimeoutError:
                abandoned = True
                self._abandoned_gen = self.gen
                log.warning("run still going after %.0f s; abandoning it (its events return to pending)", grace)
        if not abandoned and self._loop_done is not None:
            # An acquire or a claim may still be on its way back: release only once the loop has left, so
            # the generation it brings is the one released and no claim it made can start a run.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._loop_done.wait(), grace)
        if self.gen is not None:
            gen = self.gen
            now = host.clock.now()
            try:
                await host.on("writer", lambda store: store.release(host.holder, gen, now=now))
            except Exception as exc:
                host.note_error(f"could not release the lease: {exc}")
            self.gen = None
            self.held_until = None


def _is_digest(event: Event) -> bool:
    """The daily digest timer's event (its payload's task; the timer is installed by the assembly)."""
    return event.source == "timer" and isinstance(event.payload, dict) and event.payload.get("task") == "digest"
