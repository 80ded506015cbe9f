"""The composition root: the one place settings become a running system.

From Settings it builds the agent (with its policy-checked tool gateway, console/agents/registry.py), the
outbox channels (the console's own plus [[channels]], phone channels among them), the default timers, the
engine that runs them, and, when [webhooks] enables it, the webhook receiver beside the engine. The CLI
(`run`) and the console both come here; nothing else wires these parts together, and the engine itself
imports neither the agents it runs nor the channels it sends through.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from console.agents.base import Agent
from console.agents.offline import DIGEST_TIMER_ID
from console.clock import Clock, WallClock
from console.config import Settings
from console.core import Store
from console.core.outbox import OutboxChannel
from console.edges.channels import build_channels
from console.edges.mailsource import MailChannel
from console.edges.phone import PhoneChannel
from console.runtime.engine import Engine, SetUp

if TYPE_CHECKING:
    from console.agents.base import RunContext

if TYPE_CHECKING:
    from console.edges.receiver import ReceiverHost, WebhookReceiver

log = logging.getLogger("agent_console.assembly")


def default_timers(settings: Settings, clock: Clock) -> SetUp:
    """The timers a new inbox gets: the daily digest on `digest_cron`. One the owner changed is kept."""

    def install(store: Store) -> None:
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
        service_channels=[channel for channel in chosen_channels if isinstance(channel, PhoneChannel | MailChannel)],
        set_up=[default_timers(settings, clock)] if install_defaults else [],
        clock=clock,
        holder=holder,
        watch_interval=watch_interval,
        idle_cap=idle_cap,
        shutdown_grace=shutdown_grace,
        watch_only=watch_only,
    )


async def start_receiver_beside(settings: Settings, engine: ReceiverHost) -> WebhookReceiver | None:
    """Start the webhook receiver next to the engine when the config has `[webhooks] enabled = true` (else
    None). It writes to the engine's inbox on its own writer thread and wakes the worker as soon as an event
    is stored. ConfigError / StoreError / OSError say why it could not start."""
    if not settings.webhooks.get("enabled"):
        return None
    from console.edges.receiver import start_receiver  # aiohttp's server, loaded only when it is wanted

    receiver = await start_receiver(settings, engine=engine)
    log.info("webhook receiver listening on %s", receiver.url)
    return receiver


@dataclass
class System:
    """A running system: the engine, and the webhook receiver beside it when the config enables one."""

    engine: Engine
    receiver: WebhookReceiver | None = None

    async def start(self) -> None:
        """The inbox's check first (the gate before intake: nothing listens on a damaged inbox), then the
        receiver: a missing secret or a port in use is a one-line error before the engine has taken the lease
        or run anything. If the engine then cannot start, the receiver is stopped again."""
        await self.engine.check_inbox()
        self.receiver = await start_receiver_beside(self.engine.settings, self.engine)
        try:
            await self.engine.start()  # the engine logs its own lease and run changes, one line each
        except BaseException:
            await self._stop_receiver()
            raise

    async def stop(self) -> None:
        await self._stop_receiver()
        await self.engine.stop()

    async def _stop_receiver(self) -> None:
        if self.receiver is not None:
            receiver, self.receiver = self.receiver, None
            await receiver.stop()


def assemble(settings: Settings, *, clock: Clock | None = None, holder: str | None = None) -> System:
    """Everything `agent-console run` runs, built (not started) from the settings."""
    return System(build_engine(settings, clock=clock, holder=holder))
