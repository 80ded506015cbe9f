"""The dispatcher sends and the core keeps the books: a blocking channel sends on the engine's sender thread,
a channel whose send is a coroutine is awaited on the engine's loop, and each one's outcome is recorded."""

from __future__ import annotations

import threading
from pathlib import Path

from console.agents.offline import OfflineAgent
from console.assembly import build_engine
from console.config import Settings
from console.core import Batch, SendError
from console.edges.channels import ConsoleChannel
from tests.support import read_until


class Blocking:
    name, at_most_once = "blocking", False

    def __init__(self) -> None:
        self.threads: list[str] = []

    def send(self, batch: Batch) -> None:
        self.threads.append(threading.current_thread().name)


class OnLoop:
    name, at_most_once = "on-loop", False

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.failures = 1

    async def send(self, batch: Batch) -> None:
        self.threads.append(threading.current_thread().name)
        if self.failures:
            self.failures -= 1
            raise SendError("the service is busy")


async def test_blocking_channels_send_off_the_loop_and_coroutine_channels_on_it(tmp_path: Path) -> None:
    blocking, on_loop = Blocking(), OnLoop()
    settings = Settings(db=tmp_path / "inbox.db", outbox_gap=0, backoff_base=0, backoff_jitter=0)
    engine = build_engine(settings, agent=OfflineAgent(), channels=[ConsoleChannel(), blocking, on_loop],
                          install_defaults=False, idle_cap=0.1)
    await engine.start()
    try:
        await engine.write(lambda s: s.queue_message("hello", now=engine.clock.now(), urgent=True))
        [message] = await read_until(engine, lambda s: s.outbox_messages(status="sent"), "the message sent")
        deliveries = await engine.read(lambda s: s.deliveries(str(message.batch_key)))
    finally:
        await engine.stop()
    assert blocking.threads == ["agent-console-sender"]  # once: the retry skipped the channel that had it
    assert on_loop.threads == [threading.current_thread().name] * 2  # the test's loop is the engine's
    assert deliveries == {"console": ("sent", None), "blocking": ("sent", None), "on-loop": ("sent", None)}
