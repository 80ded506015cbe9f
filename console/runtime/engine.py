"""Engine: the worker, the scheduler and the paced outbox dispatcher on one inbox, as asyncio tasks.

The database is the bus: the engine holds no truth the file does not hold. It wakes at once on an
in-process ingest, and on another process's commit as soon as its change feed hears of it (on SQLite the
kernel reports the write to the file's WAL and PRAGMA data_version confirms the commit: console.core.walfeed;
on PostgreSQL a NOTIFY). It publishes change notices that a UI may subscribe to; it never touches a UI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from console import telemetry
from console.agents.base import Agent
from console.clock import Clock, WallClock
from console.config import Settings, open_inbox
from console.core import Store, StoreError
from console.core.backend import ChangeFeed, QuickCheck
from console.core.errors import InboxDamaged, damage_met, is_damage
from console.core.gate import START_CHECK_SECONDS, check_before_intake
from console.core.outbox import OutboxChannel
from console.notices import Notice, NoticeKind
from console.runtime.dbthread import DbThread
from console.runtime.dispatcher import Dispatcher
from console.runtime.host import THREAD_ROLES, Mode, Service, ServiceChannel, ThreadRole
from console.runtime.maintenance import Maintenance
from console.runtime.scheduler import Scheduler
from console.runtime.worker import Worker

T = TypeVar("T")
log = logging.getLogger("agent_console.engine")


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


# A write the engine makes once each time it starts, before its services run (the default timers).
SetUp = Callable[[Store], None]


class WatchOnly(StoreError):
    """A write asked of a watch-only engine (the console's --read-only): refused before it reaches the inbox."""


class Engine:
    """The services on one inbox. Built by console.assembly, which chooses the agent, the channels and
    what to set up at start from the settings; the engine runs what it is given."""

    def __init__(
        self,
        settings: Settings,
        *,
        agent: Agent,
        channels: Sequence[OutboxChannel],
        service_channels: Sequence[ServiceChannel] = (),
        set_up: Sequence[SetUp] = (),
        clock: Clock | None = None,
        holder: str | None = None,
        watch_interval: float | None = 0.05,
        idle_cap: float | None = None,
        shutdown_grace: float = 10.0,
        watch_only: bool = False,
    ) -> None:
        if not channels:
            raise ValueError("an engine needs at least one outbox channel")
        self.settings = settings
        self.clock: Clock = clock or WallClock()
        self.agent: Agent = agent
        self.holder = holder or default_holder()
        self.path: Path | str = settings.db  # an inbox file, or a PostgreSQL URL
        self._set_up = list(set_up)
        self.watch_interval = watch_interval
        # The longest a service sleeps without re-checking (real seconds); a third of the TTL keeps
        # the lease renewed while idle.
        self.idle_cap = idle_cap if idle_cap is not None else max(0.05, settings.lease_ttl / 3)
        self.shutdown_grace = shutdown_grace
        # Watch-only (the console's --read-only): read-only connections and the watcher alone; no lease, run,
        # timer, send or write of any kind, so a second screen or a shared terminal cannot change the inbox.
        self.watch_only = watch_only
        self.last_error: str | None = None
        # Set once the inbox is found damaged (a read or write met a damaged page): every service stops, so
        # nothing more is claimed, run, sent or stored, and this says why.
        self.damaged: str | None = None
        self._checked = False
        self._channels = list(channels)
        self._service_channels = list(service_channels)
        self._subscribers: list[Callable[[Notice], None]] = []
        self._wake_events: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._mode: Mode = "stopped"
        self._threads: dict[ThreadRole, DbThread] = {}
        self.worker = Worker(self, agent)
        self.scheduler = Scheduler(self)
        self.dispatcher = Dispatcher(self, self._channels)
        self.maintenance = Maintenance(self)

    # --- lifecycle ------------------------------------------------------------------------------
    def _opener(self, role: ThreadRole) -> Callable[[], Store]:
        # No connection checks the file as it opens: check_inbox() runs the one gate, bounded in time, first.
        return lambda: open_inbox(self.settings, read_only=self.watch_only)

    def _thread(self, role: ThreadRole) -> DbThread:
        if role not in THREAD_ROLES:  # mypy refuses a misspelt role; this refuses one from untyped code
            raise ValueError(f"no database thread has the role {role!r}; the roles are {', '.join(THREAD_ROLES)}")
        if role not in self._threads:
            self._threads[role] = DbThread(role, self._opener(role))
        return self._threads[role]

    async def start(self) -> None:
        """Open the inbox (a StoreError says what is wrong with it) and start the services."""
        if self._tasks:
            return
        self._stopping = False
        self._mode = "starting"
        if self.watch_only:  # it takes no work: no gate before intake, no agent, no set-up, no services
            self._tasks = [asyncio.create_task(self._watch(), name="agent-console-watcher")]
            self._mode = "watching"
            log.info("engine watching %s (read-only)", self.path)
            return
        await self.prepare()
        # Versions before this one left an answered approval's expiry timer waiting (listed, counted as
        # the next timer due): drop what they left, once per start.
        await self.write(lambda store: store.drop_settled_expiry_timers())
        for set_up in self._set_up:
            await self.write(set_up)
        # Nothing is loaded yet: the SDK comes with the first span (a run), never before the console's first frame.
        telemetry.configure(self.settings.telemetry_file.parent, name=self.settings.telemetry_file.name,
                            inbox=self.settings.inbox_name, enabled=self.settings.telemetry)
        channel_services = await self._start_service_channels()
        loop_tasks = [
            ("worker", self.worker.run()),
            ("scheduler", self.scheduler.run()),
            ("dispatcher", self.dispatcher.run()),
            ("maintenance", self.maintenance.run()),
            ("watcher", self._watch()),
            *channel_services,
        ]
        self._tasks = [asyncio.create_task(coro, name=f"agent-console-{name}") for name, coro in loop_tasks]
        log.info("engine started on %s as %s (agent %s)", self.path, self.holder, self.agent_name)

    async def prepare(self) -> None:
        """What start() does before it takes any work: the inbox's check (the gate before intake, unless it has
        passed already) and the build of an agent made as the engine starts (LateAgent: its imports, a second
        or so, run beside the check). The assembly's System runs it before it starts the webhook receiver, so
        that nothing listens on a damaged inbox; its errors are start()'s. A watch-only engine has neither."""
        if self.watch_only:
            return
        if self._mode == "stopped":
            self._mode = "starting"
        prepare = getattr(self.agent, "prepare", None)
        if self._checked:
            if callable(prepare):
                await asyncio.to_thread(prepare)
        elif callable(prepare):
            outcomes = await asyncio.gather(asyncio.to_thread(prepare), self.check_inbox(), return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
        else:
            await self.check_inbox()

    async def check_inbox(self, seconds: float = START_CHECK_SECONDS) -> QuickCheck:
        """The gate before intake (console.core.gate), on the writer's connection: a damaged inbox, or one
        that must take no work, refuses here with one line (StoreError), before anything listens or claims.
        start() runs it (through prepare()) unless it has already passed."""
        self.damaged = None
        report = await self._thread("writer")(lambda store: check_before_intake(store, seconds=seconds))
        self._checked = True
        if report.finished:  # not at INFO: a start that then fails says one line only (its error)
            log.debug("inbox checked: no damage found (%.2f s)", report.seconds)
        else:
            log.info("inbox checked for %.1f s, not to its end (a large file): no damage found so far; "
                     "`agent-console check` reads it all", report.seconds)
        return report

    async def _start_service_channels(self) -> list[Service]:
        """Each service channel's own services (a phone channel's listener and card keeper). A channel that
        cannot start (its secrets file is readable by others) stops the engine's start with that ConfigError,
        leaving nothing running."""
        services: list[Service] = []
        started: list[ServiceChannel] = []
        try:
            for channel in self._service_channels:
                services += await channel.start(self)
                started.append(channel)
        except BaseException:
            for coroutine in (coro for _, coro in services):
                coroutine.close()
            for channel in started:
                await channel.stop()
            threads, self._threads = self._threads, {}  # as stop() does
            for thread in threads.values():
                await thread.close()
            self._mode = "stopped"
            raise
        return services

    async def stop(self) -> None:
        """Finish (or abandon) the current run, release the lease, close the connections."""
        if self._stopping:
            return
        self._stopping = True
        self.wake()
        await self.worker.shutdown(self.shutdown_grace)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for channel in self._service_channels:
            await channel.stop()
        # Let go of the threads before closing them: a read that comes meanwhile (a pane redrawn as the console
        # quits) gets a thread of its own, as one after the stop does. Queued behind a closing thread's end it
        # was never answered, and the pane awaiting it never closed: the console hung as it quit.
        threads, self._threads = self._threads, {}
        for role, thread in threads.items():
            await thread.close(wait=role != "runner" or not self.worker.busy)
        self._checked = False
        closer = getattr(self.agent, "close", None)  # an agent with tools holds MCP sessions and processes
        if callable(closer):
            closer()
        self._mode = "stopped"
        await asyncio.to_thread(telemetry.flush)
        self.publish("lease", "stopped")
        log.info("engine stopped")

    @property
    def stopping(self) -> bool:
        return self._stopping

    # --- state ----------------------------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        if mode != self._mode:
            was_active, self._mode = self._mode == "active", mode
            log.info("mode: %s", mode)
            self.publish("lease", mode)
            if was_active:
                self.wake()  # a listener's long poll under the lease ends at once (ListenerFence.hold)

    @property
    def gen(self) -> int | None:
        return self.worker.gen

    @property
    def held_until(self) -> int | None:
        """Until when the lease this engine holds lasts (the inbox's clock), as its last renewal set it."""
        return self.worker.held_until

    @property
    def agent_name(self) -> str:
        return str(getattr(self.agent, "name", type(self.agent).__name__))

    @property
    def channel_names(self) -> list[str]:
        return [channel.name for channel in self._channels]

    def stall(self, stalled: bool = True) -> None:
        """Make the worker stop renewing its lease (mid-run if it is running), to watch a takeover."""
        if self.watch_only:
            return
        self.worker.stalled = stalled
        self.set_mode("stalled" if stalled else ("active" if self.worker.gen else "standby"))
        self.wake()

    # --- database access ------------------------------------------------------------------------
    async def read(self, fn: Callable[[Store], T]) -> T:
        return await self.on("reader", fn)

    async def write(self, fn: Callable[[Store], T]) -> T:
        if self.watch_only:
            raise WatchOnly("this console is read-only (--read-only): it watches and changes nothing")
        if self.damaged is not None:  # the console's writes (an ingest, an answer) take no new work either
            raise InboxDamaged(self.damaged)
        result = await self.on("writer", fn)
        self.wake()
        return result

    async def on(self, role: ThreadRole, fn: Callable[[Store], T]) -> T:
        """Run fn on the database thread of one role (writer, runner, sender, reader, maintenance). Damage met
        there stops the engine's intake (halt_on_damage) before the error goes on to the caller."""
        try:
            return await self._thread(role)(fn)
        except Exception as exc:
            if is_damage(exc):
                self.halt_on_damage(exc)
                raise damage_met(self.path, exc) from exc
            raise

    def halt_on_damage(self, exc: BaseException) -> None:
        """A read or write met a damaged page: stop every service (nothing more is claimed, run, sent or
        stored: a receiver beside the engine refuses deliveries too), and say why, once."""
        if self.damaged is not None:
            return
        self.damaged = str(damage_met(self.path, exc))
        log.error("stopped taking work: %s", self.damaged)
        self.last_error = self.damaged
        self.publish("log", self.damaged)
        self.set_mode("halted")

    async def ingest(self, source: str, source_id: str, payload: Any) -> bool:
        now = self.clock.now()

        def ingest(store: Store) -> bool:
            stored = store.ingest(source, source_id, payload, now=now)
            store.write_refusals()  # a refused copy's count is shown at once: not held for the next write
            return stored

        stored = await self.write(ingest)
        self.publish("events", f"{source}/{source_id}")
        return stored

    async def answer(self, request_id: str, answer: str, *, via: str = "console") -> str:
        now = self.clock.now()
        outcome = await self.write(lambda store: store.answer_approval(request_id, answer, now=now, via=via))
        self.publish("approvals", f"{request_id}: {outcome}")
        return outcome

    # --- notices and wake-ups -------------------------------------------------------------------
    def subscribe(self, callback: Callable[[Notice], None]) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def publish(self, kind: NoticeKind, detail: str = "") -> None:
        notice = Notice(kind, detail)
        for callback in list(self._subscribers):
            try:
                callback(notice)
            except Exception:  # a subscriber's bug must not stop the engine
                log.exception("notice subscriber failed")

    def wake(self) -> None:
        for event in self._wake_events:
            event.set()

    def wake_event(self) -> asyncio.Event:
        event = asyncio.Event()
        self._wake_events.append(event)
        return event

    async def sleep(self, wake: asyncio.Event, seconds: float) -> None:
        """Wait until woken or for `seconds` of real time (at most idle_cap)."""
        timeout = min(self.idle_cap, max(0.0, seconds))
        if timeout > 0 and not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
        wake.clear()

    def seconds_until(self, when: int | None) -> float:
        if when is None:
            return self.idle_cap
        return float(max(0, when - self.clock.now()))

    async def _watch(self) -> None:
        """Wake everything when any other connection (thread or process) commits to the inbox. The change feed
        is told of commits (PostgreSQL's NOTIFY; on SQLite the kernel's word that the file's WAL was written,
        see console.core.walfeed), so an idle engine does not look. No watcher with watch_interval None."""
        if self.watch_interval is None:
            return
        feed: ChangeFeed | None = None
        retry_in = self.watch_interval
        try:
            while not self._stopping:
                try:
                    if feed is None:
                        feed = await self._open_feed()
                    # As long as the feed allows: stopping closes it, and its close ends the wait (both backends',
                    # on Linux) or the wait is short. Each wait that runs out is a wake-up of an idle engine.
                    changed = await asyncio.to_thread(feed.wait, feed.longest_wait)
                    retry_in = self.watch_interval
                except Exception as exc:
                    self.note_error(f"watcher: {exc}")
                    changed = True  # a failed look counts as a change, so what committed meanwhile is not missed
                    await asyncio.sleep(retry_in)  # the file or the server is away: look again, less often
                    retry_in = min(self.idle_cap, 2 * retry_in)
                if changed and not self._stopping:
                    self.wake()
                    self.publish("events", "the inbox changed")
                    # A burst of commits wakes once per interval: a standby tries the lease on every wake-up,
                    # and each try takes the writers' lock.
                    await asyncio.sleep(self.watch_interval)
        finally:
            if feed is not None:
                # Stopping cancels this task while a thread may still be in feed.wait: the feed is closed in a
                # thread, so stop() never blocks the event loop on it (PostgreSQL's close waits for the wait).
                asyncio.get_running_loop().run_in_executor(None, feed.close)

    async def _open_feed(self) -> ChangeFeed:
        """The change feed, opened on the reader's thread. Stopping may cancel the watcher while the thread opens
        it: the thread does not know, and would hand the open feed to nobody (a connection, and on SQLite an
        inotify watch and an eventfd, left open per stop). Cancelled then, this waits for the feed and closes it
        (as the watcher's own close does, in a thread) before the cancel goes on."""
        opening = asyncio.ensure_future(self.read(lambda store: store.change_feed()))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # a feed that failed to open has nothing to close
                feed = await opening
                asyncio.get_running_loop().run_in_executor(None, feed.close)
            raise

    def note_run_error(self, message: str) -> None:
        """A run failed (its event keeps the error and is retried): kept as the last error, not announced."""
        self.last_error = message

    def note_error(self, message: str) -> None:
        self.last_error = message
        log.warning("%s", message)
        self.publish("log", message)
