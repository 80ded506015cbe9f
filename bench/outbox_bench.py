"""Queue -> sent latency of one message through a real engine's dispatcher, and the thread crossings it costs.

    python bench/outbox_bench.py [--samples 100] [--dir /tmp/x]

Two outboxes, each a real engine on a fresh inbox file (wall clock, urgent messages so no gap holds them):
- phone: the console channel and a Telegram channel pointed at the stand-in Bot API on 127.0.0.1
  (tests/edges/phone_standins.py), the path the phone channels take;
- file: the console channel and a JSON-lines file channel (fsynced), the path of a blocking channel.

Each sample queues one message (Store.queue_message through the engine's writer, which wakes the dispatcher),
then waits for the channel to hold it (the stand-in's chat, or the file's line) and for the dispatcher's
"sent" notice (the batch recorded as sent). Between samples the engine is left idle for 20-60 ms.

Thread crossings: every hand-off the send path makes between the event loop and another thread is counted
(a job given to one of the engine's database threads, a coroutine handed to the loop from a thread, a
function handed to a worker thread), when the dispatcher or a channel's send side asked for it; a hand-off and
its answer are two crossings. The count includes the dispatcher's look at the outbox after the send (when it
finds nothing more due). The same file runs against an older tree (PYTHONPATH=that tree, --tree) to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The send side: a hand-off asked for by one of these frames belongs to the send path.
SEND_SIDE = {
    "runtime/dispatcher.py": None,  # every function
    "edges/phone.py": {"send", "_deliver", "_deliver_one", "post", "post_card"},
    "edges/telegram.py": {"post", "post_card", "default_chat", "call", "_ref"},
}


def on_send_path() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename.replace(os.sep, "/")
        for tail, functions in SEND_SIDE.items():
            if name.endswith(tail) and (functions is None or frame.f_code.co_name in functions):
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class Crossings:
    """Counts the send path's hand-offs between threads, by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.active = False
        self._originals: tuple[Any, Any, Any] = (None, None, None)

    def install(self) -> None:
        from console.runtime.dbthread import DbThread

        submit = DbThread._submit
        run_threadsafe = asyncio.run_coroutine_threadsafe
        to_thread = asyncio.to_thread
        counts = self

        def counted_submit(thread: Any, work: Any) -> Any:
            if counts.active and on_send_path():
                counts.counts[f"db thread ({thread.name})"] += 1
            return submit(thread, work)

        def counted_run_threadsafe(coro: Any, loop: Any) -> Any:
            if counts.active and on_send_path():
                counts.counts["thread -> loop (run_coroutine_threadsafe)"] += 1
            return run_threadsafe(coro, loop)

        async def counted_to_thread(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if counts.active and on_send_path():
                counts.counts["loop -> worker thread (to_thread)"] += 1
            return await to_thread(fn, *args, **kwargs)

        self._originals = (submit, run_threadsafe, to_thread)
        DbThread._submit = counted_submit  # type: ignore[method-assign]
        asyncio.run_coroutine_threadsafe = counted_run_threadsafe
        asyncio.to_thread = counted_to_thread  # type: ignore[assignment]

    def uninstall(self) -> None:
        from console.runtime.dbthread import DbThread

        DbThread._submit, asyncio.run_coroutine_threadsafe, asyncio.to_thread = self._originals  # type: ignore

    def total(self) -> int:
        return 2 * sum(self.counts.values())  # each hand-off is answered: there and back


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_for(predicate: Callable[[], Any], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not met")
        await asyncio.sleep(0.0005)


def file_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


async def measure(kind: str, folder: Path, samples: int, crossings: Crossings) -> dict[str, Any]:
    from console.config import Settings
    from console.edges.channels import build_channels
    try:
        from console.assembly import build_engine
    except ImportError:  # a tree from before the composition root moved
        from console.runtime.assembly import build_engine  # type: ignore[no-redef]
    from tests.edges.phone_standins import StandInBotApi

    owner, token = 424242, "123456:bench-token"
    bot = StandInBotApi(token=token)
    await bot.start()
    out = folder / f"{kind}-outbox.jsonl"
    channel: dict[str, Any] = ({"type": "telegram", "token_env": "BENCH_TG_TOKEN", "chat_id": owner,
                                "api_base": bot.url} if kind == "phone" else {"type": "file", "path": str(out)})
    settings = Settings(db=folder / f"{kind}.db", outbox_gap=3600, channels=[{"type": "console"}, channel],
                        webhooks={"secrets_file": str(folder / "secrets.env")})
    channels = build_channels(settings, environ={"BENCH_TG_TOKEN": token})
    engine = build_engine(settings, channels=channels, install_defaults=False)
    sent = asyncio.Event()
    engine.subscribe(lambda notice: sent.set() if notice.kind == "outbox" and notice.detail.startswith("sent")
                     else None)

    def delivered() -> int:
        return len(bot.chats.get(owner, [])) if kind == "phone" else file_lines(out)

    await engine.start()
    try:
        await wait_for(lambda: engine.mode == "active")
        reached: list[float] = []
        recorded: list[float] = []
        for n in range(-5, samples):  # five to warm up, not counted
            await asyncio.sleep(random.uniform(0.02, 0.06))
            before = delivered()
            sent.clear()
            crossings.active = n >= 0
            start = time.perf_counter()
            await engine.write(lambda s, n=n: s.queue_message(f"message {n}", now=engine.clock.now(), urgent=True))
            await wait_for(lambda before=before: delivered() > before)
            at_channel = time.perf_counter()
            await asyncio.wait_for(sent.wait(), 30)
            at_sent = time.perf_counter()
            await asyncio.sleep(0.01)  # the dispatcher's look after the send, counted with the message
            crossings.active = False
            if n >= 0:
                reached.append((at_channel - start) * 1000)
                recorded.append((at_sent - start) * 1000)
        return {"reached": reached, "recorded": recorded}
    finally:
        await engine.stop()
        await bot.stop()


def summary(values: list[float]) -> str:
    return f"p50 {statistics.median(values):6.2f} ms  p99 {pct(values, 0.99):6.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose console package is measured")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree))
    sys.path.insert(1, str(ROOT))  # the stand-ins come from this checkout's tests/
    base = args.dir or Path(tempfile.mkdtemp(prefix="outbox-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for kind in ("phone", "file"):
        crossings = Crossings()
        crossings.install()
        figures = await measure(kind, base, args.samples, crossings)
        results[kind] = {**figures, "crossings_per_message": crossings.total() / args.samples,
                         "handoffs": dict(crossings.counts)}
        crossings.uninstall()
    if args.json:
        print(json.dumps({k: {**v, "reached": statistics.median(v["reached"]),
                              "recorded": statistics.median(v["recorded"])} for k, v in results.items()}))
        return
    import console

    print(f"outbox: queue -> sent, {args.samples} urgent messages one at a time ({Path(console.__file__).parent})")
    for kind, figures in results.items():
        print(f"{kind:<6} at the channel {summary(figures['reached'])}   recorded sent {summary(figures['recorded'])}"
              f"   thread crossings per message {figures['crossings_per_message']:.1f}")
        for what, count in sorted(figures["handoffs"].items()):
            print(f"         {what}: {count / args.samples:.2f} hand-offs per message")


if __name__ == "__main__":
    asyncio.run(main())
