"""What the payloads' checksums cost (issue 37 item 6, issue 38 requirement 3): the Store with them against the same
Store with them off, in one run, on one disk.

Off means the insert writes no checksum (NULL, as a row stored before them) and so the read compares none: the
functions that take and compare it (statements.payload_checksum, as the backends imported it) are swapped for ones
that do nothing, for the "off" rounds only. Both take turns, round by round, on fresh files in the same folder, so
that the disk's and the machine's moods fall on both alike. Lines:

- durable single ingest (Store.ingest: a transaction and an fsync each; the checksum is a CRC-32 of ~100 bytes),
- batched ingest (Store.ingest_many of 500, one fsync for all: where the CPU's share is largest),
- the cycle (ingest_many, then claim and finish batches of 100: every claimed payload is compared).

Printed: events a second with and without, and with / without (1.0 = costs nothing; the target is >= 0.95, i.e.
without <= 1.05x with), and the CPU time an event takes in this process with and without (what a checksum can add;
an fsync's wait is the disk's).

    python bench/checksum_bench.py            # about a minute
    python bench/checksum_bench.py --quick    # a few seconds: the smoke test's size
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import timeit
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the script runs as `python bench/checksum_bench.py`

import console.core.base as base_module  # noqa: E402
import console.core.sqlite as sqlite_module  # noqa: E402
from console.core import Store  # noqa: E402
from console.core.base import dumps  # noqa: E402
from console.core.statements import payload_checksum  # noqa: E402

NOW = 1_700_000_000
# The places that took payload_checksum by name (from console.core.statements import payload_checksum).
PLACES = (base_module, sqlite_module)


def payload(i: int) -> dict[str, Any]:
    return {"text": "a webhook delivery of ordinary size", "n": i, "tags": ["bench", "store"]}


def no_checksum(text: str) -> None:
    return None


@contextlib.contextmanager
def checksums(on: bool) -> Iterator[None]:
    if on:
        yield
        return
    kept = [place.payload_checksum for place in PLACES]
    for place in PLACES:
        place.payload_checksum = no_checksum  # type: ignore[assignment]
    try:
        yield
    finally:
        for place, function in zip(PLACES, kept, strict=True):
            place.payload_checksum = function  # type: ignore[assignment]


class Timed:
    """Wall time and this process's CPU time of a block (the CPU's is what a checksum can add: an fsync's wait on
    a disk shared with other work moves the wall time by far more than the work measured)."""

    def __enter__(self) -> Timed:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    def per(self, count: int) -> tuple[float, float]:
        """(events a second by the wall clock, CPU microseconds an event)."""
        return count / self.wall, self.cpu / count * 1e6


def single(db: Path, count: int) -> tuple[float, float]:
    with Store.open(db) as store, Timed() as timed:
        for i in range(count):
            store.ingest("bench", f"k-{i}", payload(i), now=NOW)
    return timed.per(count)


def batched(db: Path, count: int) -> tuple[float, float]:
    with Store.open(db) as store, Timed() as timed:
        for first in range(0, count, 500):
            store.ingest_many([("bench", f"k-{i}", payload(i)) for i in range(first, min(count, first + 500))],
                              now=NOW)
    return timed.per(count)


def cycle(db: Path, count: int) -> tuple[float, float]:
    with Store.open(db, batch_cap=100) as store, Timed() as timed:
        gen = store.acquire("bench", now=NOW)
        assert gen is not None
        for first in range(0, count, 500):
            store.ingest_many([("bench", f"k-{i}", payload(i)) for i in range(first, min(count, first + 500))],
                              now=NOW)
        done = 0
        while batch := store.claim_batch("bench", gen, now=NOW):
            assert all(event.payload is not None and not event.damaged for event in batch)
            store.finish("bench", gen, [event.id for event in batch], now=NOW)
            done += len(batch)
        assert done == count
    return timed.per(count)


LINES: dict[str, tuple[Callable[[Path, int], tuple[float, float]], int, int]] = {
    # line: (how, events a round, events a round with --quick)
    "durable single ingest": (single, 1_000, 20),
    "batched ingest (500 a transaction)": (batched, 20_000, 1_000),
    "ingest, claim and finish (batches of 100)": (cycle, 10_000, 500),
}


def measure(folder: Path, rounds: int, quick: bool) -> list[dict[str, Any]]:
    rows = []
    for line, (how, count, quick_count) in LINES.items():
        rates: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        for round_number in range(rounds):
            order = ("on", "off") if round_number % 2 == 0 else ("off", "on")  # neither always goes first
            for mode in order:
                db = folder / f"{line[:6].strip()}-{mode}-{round_number}.db"
                with checksums(mode == "on"):
                    rate, micros = how(db, quick_count if quick else count)
                rates[mode].append(rate)
                cpu[mode].append(micros)
                for part in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
                    part.unlink(missing_ok=True)
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        ratios = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
        cpu_on, cpu_off = statistics.median(cpu["on"]), statistics.median(cpu["off"])
        rows.append({"line": line, "on": on, "off": off, "ratio": on / off,
                     "ratio_range": [min(ratios), max(ratios)], "rounds": rounds,
                     "cpu_us_on": cpu_on, "cpu_us_off": cpu_off, "cpu_ratio": cpu_on / cpu_off})
    return rows


def checksum_alone() -> dict[str, float]:
    """The checksum's own work on this benchmark's payload, timed alone (the least of several repeats: the work,
    without the machine's noise): taken when stored (encode + CRC-32) and compared when read (CRC-32 of the bytes)."""
    text = dumps(payload(12345))
    stored = text.encode("utf-8")
    write = min(timeit.repeat(lambda: payload_checksum(text), number=20_000, repeat=7)) / 20_000
    read = min(timeit.repeat(lambda: zlib.crc32(stored), number=20_000, repeat=7)) / 20_000
    return {"bytes": len(stored), "write_us": write * 1e6, "read_us": read * 1e6}


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Payload checksums on against off, {result['rounds']} rounds each taking turns (medians), load "
             f"{result['load_before']:.1f} before, {result['load_after']:.1f} after:", "",
             "| line | with checksums | without | with / without | range over rounds | CPU an event, with / without "
             "| CPU with / without |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in result["rows"]:
        low, high = row["ratio_range"]
        lines.append(f"| {row['line']} | {row['on']:,.0f}/s | {row['off']:,.0f}/s | {row['ratio']:.3f} | "
                     f"{low:.2f}–{high:.2f} | {row['cpu_us_on']:.1f} / {row['cpu_us_off']:.1f} µs | "
                     f"{row['cpu_ratio']:.3f} |")
    alone = result["alone"]
    lines += ["", f"The checksum's own work on this {alone['bytes']}-byte payload, timed alone: "
              f"{alone['write_us']:.2f} µs when it is stored (UTF-8 encode and CRC-32), {alone['read_us']:.2f} µs "
              "when it is read (CRC-32 of the bytes read)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--rounds", type=int, help="rounds of each line (default 6; 2 with --quick)")
    parser.add_argument("--dir", type=Path, help="where the inbox files go (default: a temp dir under /tmp)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--markdown", action="store_true", help="print the table for docs/performance.md")
    options = parser.parse_args()
    rounds = options.rounds or (2 if options.quick else 6)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=options.dir, prefix="checksum-bench-") as scratch:
        rows = measure(Path(scratch), rounds, options.quick)
    result = {"rounds": rounds, "rows": rows, "load_before": load_before, "load_after": os.getloadavg()[0],
              "alone": checksum_alone()}
    for row in rows:
        print(f"{row['line']:<45} with {row['on']:9,.0f}/s   without {row['off']:9,.0f}/s   "
              f"with/without {row['ratio']:.3f}   CPU an event {row['cpu_us_on']:.1f} / {row['cpu_us_off']:.1f} µs "
              f"({row['cpu_ratio']:.3f})")
    if options.json:
        options.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if options.markdown:
        print(markdown(result))


if __name__ == "__main__":
    main()
