"""Waiting on conditions, bounded, for every test room: one place instead of a copy per file.

Tests never sleep to wait for something: they poll a condition at a short interval and fail, saying what
they waited for, once a generous limit passes (a loaded CI machine is slow, not wrong).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from console.core import OutboxChannel, Store
from console.runtime.dispatcher import send_once

if TYPE_CHECKING:
    from textual.pilot import Pilot

T = TypeVar("T")
LIMIT = 60.0
RAM_DISK = "/dev/shm"


def on_disk(env: dict[str, str]) -> dict[str, str]:
    """env for a benchmark that measures the disk itself (fsyncs per second, acks per fsync): without the TMPDIR
    tests/conftest.py sets to the machine's tmpfs, so it runs where a person running it would, in the system's
    temporary folder."""
    return {name: value for name, value in env.items() if not (name == "TMPDIR" and value == RAM_DISK)}


class Reads(Protocol):
    """An engine, or anything that reads the inbox on its own thread."""

    async def read(self, fn: Callable[[Store], Any]) -> Any: ...


def wait_until(condition: Callable[[], T], what: str = "the condition", *, limit: float = LIMIT,
               interval: float = 0.05) -> T:
    """Poll condition() until it returns something true, and return that."""
    deadline = time.monotonic() + limit
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting for {what}")
        time.sleep(interval)  # the polling interval of a condition check, not a wait standing in for it
    return result


async def until(condition: Callable[[], T], what: str = "the condition", *, limit: float = LIMIT,
                interval: float = 0.01) -> T:
    """wait_until inside an event loop: the loop keeps running while it waits."""
    deadline = asyncio.get_running_loop().time() + limit
    while not (result := condition()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting for {what}")
        await asyncio.sleep(interval)  # the polling interval of a condition check
    return result


async def read_until(engine: Reads, check: Callable[[Store], Any], what: str = "the condition", *,
                     limit: float = LIMIT, interval: float = 0.01) -> Any:
    """Poll a condition read through the engine's reader until it holds; return what it read."""
    deadline = asyncio.get_running_loop().time() + limit
    while not (result := await engine.read(check)):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting for {what}")
        await asyncio.sleep(interval)  # the polling interval of a condition read from the inbox
    return result


def inbox_until(db: Path | str, check: Callable[[Store], Any], what: str = "the condition", *, limit: float = LIMIT,
                interval: float = 0.05) -> Any:
    """Poll a condition on the inbox (a file or a PostgreSQL URL, which another process writes) until it holds;
    return what it read."""
    with Store.open(db, check=False) as store:
        return wait_until(lambda: check(store), what, limit=limit, interval=interval)


async def pilot_until(pilot: Pilot[Any], condition: Callable[[], Any], what: str = "the condition", *,
                      limit: float = LIMIT) -> None:
    """Let the app process messages until condition() holds."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting for {what}")
        await pilot.pause(0.02)


def send_due(store: Store, channels: Sequence[OutboxChannel], *, now: int) -> int:
    """One pass of the engine's dispatcher (runtime/dispatcher.send_once) over this store, its bookkeeping on this
    thread: at most one batch sent to every channel. Returns the messages delivered to every channel."""

    async def inline(fn: Callable[[Store], T]) -> T:
        return fn(store)

    sent, _ = asyncio.run(send_once(inline, channels, now=now))
    return sent
