"""Ingest -> run-start latency and engine throughput, against a fixed-interval poller in the same run.

    python bench/latency_bench.py [--samples 200] [--throughput 2000] [--dir /tmp/x]

In-process: Engine.ingest, then the time until the agent's run() starts.
Cross-process: another process commits an event (Store.ingest); the kernel tells the engine's change feed of
the write to the WAL (inotify) and PRAGMA data_version confirms the commit. Between samples the engine is left
idle for 50-250 ms, so each sample measures a wake-up from idle, not a worker that happened to be busy
already. The peer is the same engine with its wake-ups disabled, so only its idle poll (interval 100 ms, a
typical queue consumer's poll) finds work: the ratio shows what waking buys.
Throughput: N events ingested at once, drained by the offline agent (batched runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.agents.base import RunContext  # noqa: E402
from console.agents.offline import OfflineAgent  # noqa: E402
from console.assembly import build_engine  # noqa: E402
from console.config import Settings  # noqa: E402


class StampingAgent:
    """Records when each run starts, keyed by the source ids it received."""

    name = "stamping"

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    def run(self, ctx: RunContext) -> None:
        at = time.time()
        for event in ctx.events:
            self.started[event.source_id] = at


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_for(predicate: Any, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not met")
        await asyncio.sleep(0.001)


async def in_process(path: Path, samples: int, *, wake: bool) -> list[float]:
    agent = StampingAgent()
    engine = build_engine(Settings(db=path), agent=agent, install_defaults=False, idle_cap=0.1)
    if not wake:
        engine.wake = lambda: None  # type: ignore[method-assign]
    await engine.start()
    try:
        await wait_for(lambda: engine.mode == "active")
        latencies = []
        for n in range(samples):
            await asyncio.sleep(random.uniform(0.05, 0.25))  # let the engine go idle between samples
            key = f"in-{wake}-{n}"
            sent = time.time()
            await engine.ingest("bench", key, {"n": n})
            await wait_for(lambda key=key: key in agent.started)
            latencies.append((agent.started[key] - sent) * 1000)
        return latencies
    finally:
        await engine.stop()


PRODUCER = """
import sys, time, json
sys.path.insert(0, sys.argv[1])
from console.core import Store
store = Store.open(sys.argv[2], check=False)
for line in sys.stdin:
    key = line.strip()
    store.ingest("bench", key, {}, now=int(time.time()))
    print(json.dumps([key, time.time()]), flush=True)
"""


async def cross_process(path: Path, samples: int, *, watch: bool) -> list[float]:
    agent = StampingAgent()
    engine = build_engine(Settings(db=path), agent=agent, install_defaults=False, idle_cap=0.1,
                    watch_interval=0.05 if watch else None)
    await engine.start()
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(ROOT), str(path)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert producer.stdin and producer.stdout
    try:
        await wait_for(lambda: engine.mode == "active")
        latencies = []
        for n in range(samples):
            await asyncio.sleep(random.uniform(0.05, 0.25))  # let the engine go idle between samples
            key = f"x-{watch}-{n}"
            producer.stdin.write(key + "\n")
            producer.stdin.flush()
            _, committed = json.loads(await asyncio.to_thread(producer.stdout.readline))
            await wait_for(lambda key=key: key in agent.started)
            latencies.append((agent.started[key] - committed) * 1000)
        return latencies
    finally:
        producer.stdin.close()
        producer.wait()
        await engine.stop()


async def throughput(path: Path, count: int) -> float:
    engine = build_engine(Settings(db=path, outbox_gap=0), agent=OfflineAgent(), install_defaults=False, idle_cap=0.1)
    await engine.start()
    try:
        start = time.perf_counter()
        await engine.write(lambda s: s.ingest_many([("chat", f"t{n}", {"text": f"hi {n}"}) for n in range(count)],
                                                   now=int(time.time())))
        done = 0
        while done < count:
            await asyncio.sleep(0.005)
            done = await engine.read(lambda s: s.counts()["done"])
        return count / (time.perf_counter() - start)
    finally:
        await engine.stop()


def line(name: str, values: list[float], peer: list[float] | None = None) -> str:
    p50, p99 = statistics.median(values), pct(values, 0.99)
    text = f"{name:<34} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms"
    if peer:
        text += f"   peer p50 {statistics.median(peer):7.2f} ms  ratio x{statistics.median(peer) / p50:5.1f}"
    return text


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--throughput", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="latency-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    ours_in = await in_process(base / "in.db", args.samples, wake=True)
    peer_in = await in_process(base / "in-peer.db", max(20, args.samples // 4), wake=False)
    ours_x = await cross_process(base / "x.db", args.samples, watch=True)
    peer_x = await cross_process(base / "x-peer.db", max(20, args.samples // 4), watch=False)
    rate = await throughput(base / "tp.db", args.throughput)
    print(f"ingest -> run start, {args.samples} samples (peer: the same engine finding work only by its 100 ms poll)")
    print(line("in-process", ours_in, peer_in))
    print(line("cross-process (WAL watch)", ours_x, peer_x))
    print(f"engine throughput, offline agent: {rate:,.0f} events/s ({args.throughput} events)")


if __name__ == "__main__":
    asyncio.run(main())
