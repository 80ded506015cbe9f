"""Engine throughput with tracing on against tracing off (issue 24: on must be at least 0.9x of off).

    python bench/telemetry_bench.py [--events 400] [--rounds 3] [--batch-cap 1] [--dir /tmp/x]

N chat events ingested at once and drained by the offline agent, once with telemetry on (spans and metrics
to the inbox's telemetry file beside it, through the SDK's batch processor) and once off, alternating, each on a
fresh inbox, after one uncounted warm-up round each (the SDK is imported once a process, with the first span: about
0.2 s, not throughput); the median of the rounds is reported. --batch-cap 1 makes every event its own run (one
invoke_agent span and its tool spans per event): the worst case for tracing. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console import telemetry  # noqa: E402
from console.agents.offline import OfflineAgent  # noqa: E402
from console.assembly import build_engine  # noqa: E402
from console.config import Settings  # noqa: E402


async def throughput(folder: Path, count: int, *, traced: bool, batch_cap: int) -> tuple[float, float, list[str]]:
    """Events per second through the engine (wall clock, and per second of this process's CPU time: the
    machine's other load moves the first far more than the second), and the names of the spans it wrote."""
    folder.mkdir(parents=True)
    settings = Settings(db=folder / "inbox.db", outbox_gap=0, batch_cap=batch_cap, telemetry=traced)
    engine = build_engine(settings, agent=OfflineAgent(), install_defaults=False, idle_cap=0.1)
    await engine.start()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        await engine.write(lambda s: s.ingest_many([("chat", f"t{n}", {"text": f"hi {n}"}) for n in range(count)],
                                                   now=int(time.time())))
        done = 0
        while done < count:
            await asyncio.sleep(0.005)  # polling the count: the measured work runs on the engine's threads
            done = await engine.read(lambda s: s.counts().get("done", 0))
        rate, cpu_rate = count / (time.perf_counter() - start), count / (time.process_time() - cpu)
    finally:
        await engine.stop()
    own = settings.telemetry_file
    return rate, cpu_rate, [str(span["name"]) for span in telemetry.read_spans(own.parent, own.name)]


async def measure(base: Path, events: int, rounds: int, batch_cap: int) -> dict[str, float | int]:
    on: list[float] = []
    off: list[float] = []
    cpu_on: list[float] = []
    cpu_off: list[float] = []
    spans = runs = 0
    # One round first, not counted: the SDK's import (about 0.2 s, once a process, with the first span) and the
    # engine's own first-start costs are not throughput.
    await throughput(base / "warm-up-on", min(events, 50), traced=True, batch_cap=batch_cap)
    await throughput(base / "warm-up-off", min(events, 50), traced=False, batch_cap=batch_cap)
    for number in range(rounds):
        # Alternate which goes first, so a warming disk cache or a neighbour's load favours neither.
        for traced in ((True, False) if number % 2 == 0 else (False, True)):
            folder = base / f"r{number}-{'on' if traced else 'off'}"
            rate, cpu_rate, written = await throughput(folder, events, traced=traced, batch_cap=batch_cap)
            (on if traced else off).append(rate)
            (cpu_on if traced else cpu_off).append(cpu_rate)
            spans = max(spans, len(written))
            runs = max(runs, sum(name.startswith("invoke_agent") for name in written))
    telemetry.configure(None, enabled=False)
    on_rate, off_rate = statistics.median(on), statistics.median(off)
    return {"events": events, "batch_cap": batch_cap, "rounds": rounds, "spans_per_round": spans,
            "runs_traced_per_round": runs,
            "on_events_per_s": round(on_rate, 1), "off_events_per_s": round(off_rate, 1),
            "ratio": round(on_rate / off_rate, 3),
            "cpu_ratio": round(statistics.median(cpu_on) / statistics.median(cpu_off), 3),
            # The best round of each: the least disturbed by the machine's other load (the usual estimator
            # for a short benchmark on a shared machine).
            "best_cpu_ratio": round(max(cpu_on) / max(cpu_off), 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-cap", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="telemetry-bench-"))
    result = await measure(base, args.events, args.rounds, args.batch_cap)
    print(f"engine throughput, offline agent, batch_cap {args.batch_cap}, {args.events} events, median of "
          f"{args.rounds}: tracing on {result['on_events_per_s']:,.0f} events/s, off {result['off_events_per_s']:,.0f}"
          f" events/s: {result['ratio']:.2f}x; per CPU second {result['cpu_ratio']:.2f}x (best rounds "
          f"{result['best_cpu_ratio']:.2f}x) "
          f"({result['spans_per_round']} spans written a round)")
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
