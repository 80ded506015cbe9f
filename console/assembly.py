"""The composition root: the one place settings become a running system, and the one place it is run.

From Settings it builds the agent (with its policy-checked tool gateway, console/agents/registry.py), the
outbox channels (the console's own plus [[channels]], phone channels among them), the default timers, the
engine that runs them, and, when [webhooks] enables it, the webhook receiver beside the engine. Every shape
of the program is a `System` built here and run the same way (start / stop / run_until_signalled, with the
one signal handler): `agent-console run` (assemble), the console (assemble_console) and `serve`, the
receiver alone (assemble_serve). Nothing else wires these parts together, and the engine itself imports
neither the agents it runs nor the channels it sends through.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from console import telemetry
from console.agents.base import Agent
from console.clock import Clock, WallClock
from console.config import ConfigError, Settings
from console.core import Store, StoreError, StoreUnavailable
from console.core.outbox import OutboxChannel
from console.edges.channels import build_channels
from console.runtime.engine import Engine, SetUp
from console.runtime.host import ServiceChannel

if TYPE_CHECKING:
    from console.agents.base import RunContext
    from console.agents.doctor import Check
    from console.edges.receiver import WebhookReceiver

log = logging.getLogger("agent_console.assembly")

# A start that meets a passing fault (the inbox's server unreachable, its lock busy past the wait, a session the
# server ended) is tried again, as the same fault is once running: 1 s, doubling to a minute, one line each time.
START_RETRY_FIRST = 1.0
START_RETRY_MAX = 60.0


def passing_fault(exc: BaseException) -> bool:
    """A fault a start waits out (StoreUnavailable: the server or the lock or the session, an inbox being moved),
    not one it exits on (damage, a moved inbox, a refused login, a newer schema: StoreError, ConfigError)."""
    return isinstance(exc, StoreUnavailable)


def default_timers(settings: Settings, clock: Clock) -> SetUp:
    """The timers a new inbox gets: the daily digest on `digest_cron`. One the owner changed is kept."""

    def install(store: Store) -> None:
        from console.agents.offline import DIGEST_TIMER_ID  # the offline agent's module, not needed before this

        if store.timer(DIGEST_TIMER_ID) is None:
            now = clock.now()
            store.add_timer(DIGEST_TIMER_ID, now, {"task": "digest"}, cron=settings.digest_cron,
                            tz=settings.timezone, now=now)

    return install


class LateAgent:
    """The configured agent, built when the engine starts rather than with the engine.

    Building it imports its tools' libraries (the MCP SDK alone takes about a second, pydantic and the
    HTTP client with it), which the console's first frame does not need: the console draws from plain reads
    first and the engine builds the agent, off the event loop, as it starts (`prepare`). A setup error
    (a missing key, a bad [mcp_servers] entry) then stops the start with its ConfigError, as it stops `run`
    before anything runs."""

    def __init__(self, settings: Settings) -> None:
        self.name = settings.agent
        self._settings = settings
        self._agent: Agent | None = None
        self._lock = threading.Lock()

    def prepare(self) -> Agent:
        with self._lock:
            if self._agent is None:
                from console.agents.registry import build_agent

                self._agent = build_agent(self.name, self._settings)
            return self._agent

    def run(self, ctx: RunContext) -> None:
        self.prepare().run(ctx)

    @property
    def tools(self) -> object:
        """The built agent's tool gateway, if it has one (the worker records its MCP servers' health)."""
        return getattr(self.prepare(), "tools", None)

    def close(self) -> None:
        closer = getattr(self._agent, "close", None)
        if callable(closer):
            closer()


def build_engine(
    settings: Settings,
    *,
    clock: Clock | None = None,
    holder: str | None = None,
    agent: Agent | None = None,
    channels: Sequence[OutboxChannel] | None = None,
    install_defaults: bool = True,
    late_agent: bool = False,
    watch_interval: float | None = 0.05,
    idle_cap: float | None = None,
    shutdown_grace: float = 10.0,
    watch_only: bool = False,
) -> Engine:
    """The engine for these settings. `agent` and `channels` replace the configured ones (tests, benchmarks);
    install_defaults=False leaves the default timers out. A bad [[channels]] entry or agent setup raises
    ConfigError / AgentSetupError, naming it, before anything runs; with late_agent=True (the console) the
    agent is built as the engine starts (LateAgent), and its setup error is raised by `start()`. watch_only: the
    console's --read-only, an engine that reads and watches and never takes the lease nor writes."""
    clock = clock or WallClock()
    if agent is None:
        if late_agent:
            agent = LateAgent(settings)
        else:
            from console.agents.registry import build_agent

            agent = build_agent(settings.agent, settings)
    chosen_channels = list(channels) if channels is not None else build_channels(settings, clock=clock)
    return Engine(
        settings,
        agent=agent,
        channels=chosen_channels,
        # the phone and mail channels (checked by what they do, so that their modules load only when configured)
        service_channels=[channel for channel in chosen_channels if isinstance(channel, ServiceChannel)],
        set_up=[default_timers(settings, clock)] if install_defaults else [],
        clock=clock,
        holder=holder,
        watch_interval=watch_interval,
        idle_cap=idle_cap,
        shutdown_grace=shutdown_grace,
        watch_only=watch_only,
    )


# SIGTERM (a `kill`, systemd), SIGINT (Ctrl-C) and SIGHUP (the terminal closed) all stop the program cleanly:
# the current run ends and the lease is released at once, so a replacement need not wait out the TTL.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
# What a System's start() does with a receiver that cannot start, when it is told to go on without one.
ReceiverError = Callable[[Exception], None]


def on_stop_signals(stop: Callable[[], object]) -> Callable[[], None]:
    """The one signal handler: each of STOP_SIGNALS calls `stop` on the running loop (`run`, `serve` and the
    console alike). Returns what takes the handlers off again. Where a loop cannot handle signals (not the main
    thread, Windows) nothing is installed."""
    loop = asyncio.get_running_loop()
    handled: list[int] = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, stop)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        handled.append(signum)

    def remove() -> None:
        for signum in handled:
            loop.remove_signal_handler(signum)

    return remove


def receiver_beside(settings: Settings, engine: Engine) -> WebhookReceiver:
    """The webhook receiver next to an engine (not started): it writes to the engine's inbox on its own writer
    thread and connection, with the engine's clock; a stored delivery wakes the worker at once; the engine's
    verdict on the inbox stands for the receiver's own check, and damage a delivery meets halts the engine.
    ConfigError names a bad [webhooks] setting."""
    from console.edges.receiver import build_receiver  # aiohttp's server, loaded only when it is wanted

    wake = engine.wake
    return build_receiver(settings, clock=engine.clock, on_stored=lambda _source, _source_id: wake(),
                          refusal=lambda: engine.damaged, on_damage=engine.halt_on_damage)


class System:
    """One shape of the program, started and stopped in one order: an engine, a webhook receiver, or both.

    start(): the engine's check of the inbox first (the gate before intake: nothing listens on a damaged inbox;
    a late agent is built beside it), then the receiver, then the engine takes the lease and works. A receiver
    that cannot start (a missing secret, a port in use) is a one-line error before the engine has taken the
    lease or run anything, or, given `on_receiver_error` (the console), is told there while the rest runs
    without it. If the engine then cannot start, the receiver is stopped again. stop(): the receiver, then the
    engine (the current run ends, the lease is released)."""

    def __init__(self, settings: Settings, engine: Engine | None = None,
                 receiver: Callable[[], WebhookReceiver] | None = None) -> None:
        """engine: None for the receiver alone (`serve`). receiver: how to build the receiver (at start, so that
        its error goes where start() sends it), None for none."""
        self.settings = settings
        self.engine = engine
        self.receiver: WebhookReceiver | None = None  # while it runs
        self._build_receiver = receiver
        self._engine_started = False

    async def start(self, *, on_receiver_error: ReceiverError | None = None,
                    stopping: asyncio.Event | None = None, on_retry: Callable[[str], None] | None = None) -> bool:
        """Start, waiting out a passing fault (passing_fault) with the running engine's backoff, one line each try
        (logged, and given to on_retry: the console shows it), until it starts (True) or `stopping` is set (False,
        nothing left running). A permanent fault raises."""
        pause = START_RETRY_FIRST
        while True:
            try:
                await self._start_once(on_receiver_error)
                return True
            except Exception as exc:
                if not passing_fault(exc):
                    raise
                line = f"could not start: {exc}; trying again in {pause:g} s"
                log.warning("%s", line)
                if on_retry is not None:
                    on_retry(line)
            if stopping is None:
                await asyncio.sleep(pause)  # the backoff between tries, not a wait for a result
            else:
                try:
                    await asyncio.wait_for(stopping.wait(), pause)
                    return False
                except TimeoutError:
                    pass
            pause = min(pause * 2, START_RETRY_MAX)

    async def _start_once(self, on_receiver_error: ReceiverError | None) -> None:
        if self.engine is not None:
            await self.engine.prepare()
        else:  # the engine configures telemetry as it starts; alone, each delivery's `ingest` span needs it here
            telemetry.configure(self.settings.telemetry_file.parent, name=self.settings.telemetry_file.name,
                                inbox=self.settings.inbox_name, enabled=self.settings.telemetry)
            # Loaded before the receiver listens, in a thread: the first delivery's span would otherwise hold the
            # event loop, and every request behind it, for the SDK's import (0.3-0.6 s on a loaded machine).
            await asyncio.to_thread(telemetry.preload)
        await self._start_receiver(on_receiver_error)
        if self.engine is not None:
            try:
                await self.engine.start()  # the engine logs its own lease and run changes, one line each
            except BaseException:
                await self._stop_receiver()
                raise
            self._engine_started = True

    async def stop(self) -> None:
        await self._stop_receiver()
        if self.engine is None:
            await asyncio.to_thread(telemetry.shutdown)
        elif self._engine_started:
            self._engine_started = False
            await self.engine.stop()

    async def run_until_signalled(self, *, on_ready: Callable[[System], None] | None = None,
                                  stop: asyncio.Event | None = None) -> None:
        """start(), then run until SIGTERM, SIGINT or SIGHUP (or until `stop` is set), then stop(): `run` and
        `serve`. on_ready is called once everything has started."""
        stopping = stop or asyncio.Event()
        remove_handlers = on_stop_signals(stopping.set)
        try:
            if not await self.start(stopping=stopping):
                return
            try:
                if on_ready is not None:
                    on_ready(self)
                await stopping.wait()
            finally:
                if self.engine is not None:
                    log.info("stopping: finishing the current run and releasing the lease")
                await self.stop()
        finally:
            remove_handlers()

    async def _start_receiver(self, on_error: ReceiverError | None) -> None:
        if self._build_receiver is None:
            return
        try:
            receiver = self._build_receiver()
            await receiver.start()
        except (ConfigError, StoreError, OSError) as exc:
            if on_error is None or passing_fault(exc):  # a passing fault: the whole start is tried again
                raise
            on_error(exc)
            return
        self.receiver = receiver
        if self.engine is not None:  # alone (`serve`), the receiver's own line and serve's say where it listens
            log.info("webhook receiver listening on %s", receiver.url)

    async def _stop_receiver(self) -> None:
        if self.receiver is not None:
            receiver, self.receiver = self.receiver, None
            await receiver.stop()


def assemble(settings: Settings, *, engine: Engine | None = None, clock: Clock | None = None,
             holder: str | None = None) -> System:
    """`agent-console run`, built (not started): the engine (`engine` replaces the one built from the settings),
    and the webhook receiver beside it when the config has `[webhooks] enabled = true` (never beside a watch-only
    engine: a receiver stores)."""
    engine = engine if engine is not None else build_engine(settings, clock=clock, holder=holder)
    beside = engine
    listens = bool(settings.webhooks.get("enabled")) and not engine.watch_only
    return System(settings, engine, (lambda: receiver_beside(settings, beside)) if listens else None)


def assemble_console(settings: Settings, *, clock: Clock | None = None, holder: str | None = None,
                     install_defaults: bool = True, read_only: bool = False) -> System:
    """The console's system: `run`'s, with the agent built as the engine starts (LateAgent), so that the first
    frame does not wait for its tools' imports; read_only (--read-only): a watch-only engine and no receiver.
    The console starts it with its own on_receiver_error."""
    engine = build_engine(settings, clock=clock, holder=holder, install_defaults=install_defaults, late_agent=True,
                          watch_only=read_only)
    return assemble(settings, engine=engine)


def assemble_serve(settings: Settings, *, host: str | None = None, port: int | None = None,
                   clock: Clock | None = None, group_commit: bool = True) -> System:
    """`agent-console serve`: the webhook receiver alone (whether or not [webhooks] enables one beside an
    engine), checking the inbox itself before it listens; another process runs what it stores."""
    from console.edges.receiver import build_receiver  # aiohttp's server, loaded only when it is wanted

    return System(settings, receiver=lambda: build_receiver(settings, host=host, port=port, clock=clock,
                                                             group_commit=group_commit, check_first=True))


def doctor_checks(settings: Settings) -> list[Check]:
    """`agent-console doctor`: can the MCP servers run in their sandboxes here (console/agents/doctor.py)."""
    from console.agents.doctor import run_doctor  # the MCP SDK with it: only for this command

    return run_doctor(settings)
