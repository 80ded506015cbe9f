"""A run's cost on an inbox holding 1,000,000 events against an empty one (issue 22: within 1.2x).

    python bench/run_cost_bench.py [--stored 1000000] [--runs 300] [--rounds 5] [--dir /tmp/x]

The full inbox is console_bench's cached one (1,000,000 done events, built once in /tmp and copied); the
empty one is new. On each, a real engine with the offline agent and batch_cap 1 (every event its own run:
claim, the agent's run with its journal steps and reply, finish, the reply's send) drains `--runs` chat events
ingested at once. The engine's start (on the full inbox its start-up gate reads the file for up to 2 s) is not
timed. The two take turns for `--rounds` rounds (the full inbox keeps what the earlier rounds added, a few
hundred events); reported are the medians of the wall time and of this process's CPU time per run, and
full / empty for each. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from console_bench import build_inbox  # noqa: E402

from console.agents.offline import OfflineAgent  # noqa: E402
from console.assembly import build_engine  # noqa: E402
from console.config import Settings  # noqa: E402


async def drain(db: Path, runs: int, label: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) per run for `runs` events, each its own run."""
    settings = Settings(db=db, outbox_gap=0, batch_cap=1, telemetry=False)
    engine = build_engine(settings, agent=OfflineAgent(), install_defaults=False, idle_cap=0.1)
    await engine.start()
    try:
        before = await engine.read(lambda s: s.counts().get("done", 0))
        start, cpu = time.perf_counter(), time.process_time()
        await engine.write(lambda s: s.ingest_many([("chat", f"{label}-{n}", {"text": f"hi {n}"}) for n in range(runs)],
                                                   now=int(time.time())))
        done = before
        while done < before + runs:
            await asyncio.sleep(0.005)  # polling the count: the measured work runs on the engine's threads
            done = await engine.read(lambda s: s.counts().get("done", 0))
        return (time.perf_counter() - start) / runs, (time.process_time() - cpu) / runs
    finally:
        await engine.stop()


async def measure(base: Path, stored: int, runs: int, rounds: int) -> dict[str, float | int]:
    full = base / "full.db"
    shutil.copyfile(build_inbox(stored), full)
    empty = base / "empty.db"
    walls: dict[str, list[float]] = {"full": [], "empty": []}
    cpus: dict[str, list[float]] = {"full": [], "empty": []}
    await drain(base / "warm-up.db", min(runs, 50), "warm")  # imports and first-start costs, not a run's
    for number in range(rounds):
        for name in (("full", "empty") if number % 2 == 0 else ("empty", "full")):
            wall, cpu = await drain(full if name == "full" else empty, runs, f"r{number}")
            walls[name].append(wall)
            cpus[name].append(cpu)
    wall_full, wall_empty = statistics.median(walls["full"]), statistics.median(walls["empty"])
    cpu_full, cpu_empty = statistics.median(cpus["full"]), statistics.median(cpus["empty"])
    return {"stored": stored, "runs": runs, "rounds": rounds,
            "wall_ms_per_run_full": round(wall_full * 1000, 3), "wall_ms_per_run_empty": round(wall_empty * 1000, 3),
            "cpu_ms_per_run_full": round(cpu_full * 1000, 3), "cpu_ms_per_run_empty": round(cpu_empty * 1000, 3),
            "wall_ratio": round(wall_full / wall_empty, 3), "cpu_ratio": round(cpu_full / cpu_empty, 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stored", type=int, default=1_000_000, help="events in the full inbox")
    parser.add_argument("--runs", type=int, default=300, help="runs timed on each inbox a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="run-cost-bench-", dir=args.dir) as folder:
        result = await measure(Path(folder), args.stored, args.runs, args.rounds)
    print(f"a run (offline agent, batch_cap 1) on {args.stored:,} stored events against an empty inbox, median of "
          f"{args.rounds}: wall {result['wall_ms_per_run_full']} ms against {result['wall_ms_per_run_empty']} ms "
          f"({result['wall_ratio']:.2f}x), CPU {result['cpu_ms_per_run_full']} ms against "
          f"{result['cpu_ms_per_run_empty']} ms ({result['cpu_ratio']:.2f}x)")
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
