"""What the services (worker, scheduler, dispatcher, maintenance) see of the engine that runs them, and the
one loop they all run in.

The services are given this narrow host, not the Engine: they cannot reach what they were not meant to
(the agent is the worker's own, the channels the dispatcher's), and nothing here imports the engine back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from console.clock import Clock
from console.config import Settings
from console.core import Store
from console.notices import NoticeKind

T = TypeVar("T")

# Each role has its own database thread and connection. A Literal, so a misspelt role is a type error instead
# of a new thread opening its own connection.
ThreadRole = Literal["writer", "runner", "sender", "reader", "maintenance"]
THREAD_ROLES: tuple[ThreadRole, ...] = ("writer", "runner", "sender", "reader", "maintenance")

# halted: the inbox was found damaged while running; every service has stopped (Engine.halt_on_damage).
# watching: a watch-only engine (the console's --read-only) that never takes the lease.
Mode = Literal["stopped", "starting", "active", "standby", "stalled", "halted", "watching"]

# A named coroutine an engine runs as one of its tasks (a phone channel's listener, for one).
Service = tuple[str, Coroutine[Any, Any, None]]


class ServiceHost(Protocol):
    """What a service needs from the engine that runs it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def holder(self) -> str: ...

    @property
    def gen(self) -> int | None:
        """The lease generation held (None: none); a phone channel's listener writes under it."""
        ...

    @property
    def idle_cap(self) -> float: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def mode(self) -> str: ...

    @property
    def damaged(self) -> str | None: ...

    def set_mode(self, mode: Mode) -> None: ...

    async def on(self, role: ThreadRole, fn: Callable[[Store], T]) -> T: ...

    async def read(self, fn: Callable[[Store], T]) -> T: ...

    async def write(self, fn: Callable[[Store], T]) -> T: ...

    def wake(self) -> None: ...

    def wake_event(self) -> asyncio.Event: ...

    async def sleep(self, wake: asyncio.Event, seconds: float) -> None: ...

    def seconds_until(self, when: int | None) -> float: ...

    def publish(self, kind: NoticeKind, detail: str = "") -> None: ...

    def note_error(self, message: str) -> None: ...

    def note_run_error(self, message: str) -> None: ...


@runtime_checkable
class ServiceChannel(Protocol):
    """An outbox channel that also runs services of its own inside the engine (the phone channels: a
    listener for answers, a keeper of cards). start() returns them; ConfigError if it cannot start."""

    async def start(self, host: ServiceHost) -> list[Service]: ...

    async def stop(self) -> None: ...


async def service_loop(host: ServiceHost, name: str, tick: Callable[[], Awaitable[float | None]]) -> None:
    """Run `tick` until the engine stops, idling for as long as it asks (None: go again at once) or until
    woken. A failing pass is noted and idles: the engine never dies of one bad step."""
    wake = host.wake_event()
    while not host.stopping:
        if host.damaged is not None:  # a damaged inbox takes no more work of any kind
            await host.sleep(wake, host.idle_cap)
            continue
        idle_for: float | None
        try:
            idle_for = await tick()
        except Exception as exc:
            if host.damaged is None:  # damage has been said once, by the engine that halted on it
                host.note_error(f"{name}: {type(exc).__name__}: {exc}")
            idle_for = host.idle_cap
        if idle_for is not None:
            await host.sleep(wake, idle_for)
