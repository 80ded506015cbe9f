"""Benchmark what starting costs against the inbox's size: the gate before intake, `status`, `ingest`, and
`agent-console run` until its worker holds the lease, on a large inbox (1 GB by default) and on an empty one.

The gate (console/core/gate.py) runs SQLite's quick check, bounded in time: START_CHECK_SECONDS for `run`,
`serve` and the console, INGEST_CHECK_SECONDS for `ingest`; `status` and the other readers check nothing. The
goal is a start whose cost stops growing with the file once the bound is reached. For context it also times
the whole quick check, which is what the gate would cost unbounded (`agent-console check` runs the still
longer full integrity check).

The large inbox is built quickly: ordinary events (a webhook's size, ~1 KB; --ordinary-mb of them, so the
tables and indexes are a real inbox's) and then large payloads (~900 KB each, overflow pages) up to --size-mb,
each part in one transaction. Warm cache only by default; --cold also times each line with the inbox's pages
dropped from the cache first (posix_fadvise DONTNEED, the inbox only).

    python bench/startup_bench.py --markdown     # builds a 1 GB inbox: about a minute on 2 shared cores
    python bench/startup_bench.py --quick        # a few seconds (what tests/bench runs)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the script runs as `python bench/startup_bench.py`

from console.core import Store  # noqa: E402
from console.core.db import bounded_quick_check  # noqa: E402
from console.core.gate import (  # noqa: E402
    INGEST_CHECK_SECONDS,
    START_CHECK_SECONDS,
    check_before_intake,
)

MB = 1024 * 1024
NOW = 1_700_000_000
LARGE_PAYLOAD = 900 * 1024
ORDINARY = {"action": "opened", "text": "x" * 900}


def build_inbox(path: Path, size_mb: int, ordinary_mb: int) -> dict[str, int]:
    """An inbox of about size_mb: ordinary events first, then large payloads; returns what went in."""
    built = {"ordinary_events": 0, "large_events": 0}
    with Store.open(path, max_payload_bytes=2 * LARGE_PAYLOAD) as store:
        ordinary = max(0, ordinary_mb * MB // 1_100)  # ~1,100 bytes a row with its index entries
        store.ingest_many([("github", f"d-{n}", ORDINARY) for n in range(ordinary)], now=NOW)
        built["ordinary_events"] = ordinary
        store.shrink_wal()
        room = size_mb * MB - path.stat().st_size
        large = max(0, room // (LARGE_PAYLOAD + 4 * 1024))
        body = {"text": "y" * LARGE_PAYLOAD}
        store.ingest_many([("bulk", f"b-{n}", body) for n in range(large)], now=NOW)
        built["large_events"] = large
        store.shrink_wal()
    return built


def environment(folder: Path) -> dict[str, str]:
    """No AGENT_CONSOLE_* setting and no user config of the machine's: the defaults, as a new user has them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env.update(PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(folder / "config"), XDG_DATA_HOME=str(folder / "data"))
    return env


def command_seconds(db: Path, *args: str) -> float:
    """Seconds one `agent-console` process takes, start to exit (it must succeed)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "console", "--db", str(db), *args], cwd=ROOT,
                          env=environment(db.parent), capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"agent-console {' '.join(args)} failed: {done.stderr.strip()}")
    return elapsed


def run_until_lease(db: Path, folder: Path) -> float:
    """Seconds from starting `agent-console run` until its worker holds the lease (read from the inbox)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "console", "--db", str(db), "run"], cwd=ROOT,
                               env=environment(folder), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        mine = f":{process.pid}:"
        with Store.open(db, read_only=True) as store:
            while True:
                lease = store.lease()
                if lease is not None and mine in lease.holder and lease.until >= time.time():
                    return time.perf_counter() - started
                if process.poll() is not None:
                    raise RuntimeError(f"agent-console run ended: {process.stderr.read() if process.stderr else ''}")
                if time.perf_counter() - started > 120:
                    raise RuntimeError("agent-console run did not take the lease within 120 s")
                time.sleep(0.01)  # the polling interval of the lease read
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def make_cold(db: Path) -> None:
    for part in (db, Path(f"{db}-wal")):
        if part.exists():
            descriptor = os.open(part, os.O_RDONLY)
            try:
                os.fsync(descriptor)
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)


def gate_seconds(db: Path) -> dict[str, Any]:
    with Store.open(db) as store:
        started = time.perf_counter()
        report = check_before_intake(store)
        return {"seconds": time.perf_counter() - started, "finished": report.finished}


def whole_quick_check_seconds(db: Path) -> float:
    with Store.open(db, read_only=True) as store:
        started = time.perf_counter()
        report = bounded_quick_check(store.connection, seconds=3600)
        assert report.finished and not report.problems
        return time.perf_counter() - started


def measure(folder: Path, size_mb: int, ordinary_mb: int, runs: int, cold: bool) -> dict[str, Any]:
    large, empty = folder / "large.db", folder / "empty.db"
    started = time.perf_counter()
    built = build_inbox(large, size_mb, ordinary_mb)
    build_s = time.perf_counter() - started
    Store.open(empty).close()
    inboxes = (("large", large), ("empty", empty))
    lines = {
        "gate": lambda db: gate_seconds(db)["seconds"],
        "status": lambda db: command_seconds(db, "status"),
        "ingest": lambda db: command_seconds(db, "ingest", "bench", f"i-{time.monotonic_ns()}", '{"n": 1}'),
        "run to lease held": lambda db: run_until_lease(db, folder),
    }
    rows: list[dict[str, Any]] = []
    for temperature in ("warm", "cold") if cold else ("warm",):
        for name, line in lines.items():
            times: dict[str, list[float]] = {"large": [], "empty": []}
            for _label, db in inboxes if runs > 1 else ():  # (a one-run smoke skips it)
                line(db)  # the program, and for warm runs the inbox, in the cache
            for run in range(runs):
                # In turns, the large inbox first every other run, so that neither gains from going second.
                for label, db in inboxes if run % 2 == 0 else inboxes[::-1]:
                    if temperature == "cold":
                        make_cold(db)
                    times[label].append(line(db))
            medians = {label: statistics.median(values) for label, values in times.items()}
            rows.append({"line": name, "cache": temperature, "large_s": medians["large"], "empty_s": medians["empty"],
                         "extra_s": medians["large"] - medians["empty"]})
    gate_on_large = gate_seconds(large)
    return {
        "bytes": {"large": large.stat().st_size, "empty": empty.stat().st_size}, "built": built,
        "build_s": build_s, "runs": runs, "rows": rows,
        "gate_finished_on_large": gate_on_large["finished"],
        "whole_quick_check_s": whole_quick_check_seconds(large),
        "bounds_s": {"start": START_CHECK_SECONDS, "ingest": INGEST_CHECK_SECONDS},
    }


def markdown(result: dict[str, Any]) -> str:
    size = result["bytes"]["large"] / MB
    built = result["built"]
    lines = [
        f"Start-up cost against the inbox's size: a {size:,.0f} MB inbox ({built['ordinary_events']:,} ordinary events "
        f"and {built['large_events']:,} of ~900 KB) against an empty one; median of {result['runs']} runs each.",
        "",
        "| what | cache | large inbox | empty inbox | large − empty |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['line']} | {row['cache']} | {row['large_s'] * 1000:,.0f} ms | "
                     f"{row['empty_s'] * 1000:,.0f} ms | {row['extra_s'] * 1000:+,.0f} ms |")
    finished = "read the whole file" if result["gate_finished_on_large"] else "stopped at its bound"
    lines += ["", f"The gate on the large inbox {finished} (bounds: {result['bounds_s']['start']:g} s at start, "
              f"{result['bounds_s']['ingest']:g} s in `ingest`); the whole quick check of it takes "
              f"{result['whole_quick_check_s']:.2f} s warm. Built in {result['build_s']:.0f} s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--ordinary-mb", type=int, default=200, help="How much of it is ordinary ~1 KB events.")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="Also time each line with the inbox out of the cache.")
    parser.add_argument("--quick", action="store_true", help="A tiny run (8 MB, 1 run): the smoke test's size.")
    parser.add_argument("--dir", type=Path, help="Where to build the inboxes (default: a temporary folder).")
    parser.add_argument("--json", type=Path, help="Write the result as JSON to this file.")
    parser.add_argument("--markdown", action="store_true", help="Print the table for docs/performance.md.")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.ordinary_mb, args.runs = 8, 2, 1
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        result = measure(Path(folder), args.size_mb, args.ordinary_mb, args.runs, args.cold)
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(markdown(result) if args.markdown else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
