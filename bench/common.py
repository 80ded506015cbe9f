"""What the store benchmarks share (bench/store_bench.py and bench/postgres_bench.py): the rounds a line is split
into, the per-round timings, the figures' formatting, the command line's sizes, the machine line and the run of
the chosen steps."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw

# A size option: (default, --quick, what it counts).
Sizes = dict[str, tuple[int, int, str]]


class Timings:
    """Per-round rates; a line's figure is their median, so a slow spell on the shared disk is outvoted.

    The systems take turns within each round (in rotating order), so every system sees the same
    spells of background load in the same proportion.
    """

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.per_round: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def timed(self, kind: str) -> Iterator[list[int]]:
        done = [0]
        start = time.perf_counter()
        yield done
        elapsed = time.perf_counter() - start
        self.count[kind] = self.count.get(kind, 0) + done[0]
        if done[0]:
            self.per_round.setdefault(kind, []).append(done[0] / elapsed if elapsed > 0 else float("inf"))

    def rate(self, kind: str) -> float:
        return statistics.median(self.per_round[kind])


def chunks(total: int, rounds: int) -> list[int]:
    """total split into rounds near-equal parts."""
    return [total // rounds + (1 if r < total % rounds else 0) for r in range(rounds)]


def rotated(kinds: tuple[str, ...], shift: int) -> list[str]:
    shift %= len(kinds)
    return [*kinds[shift:], *kinds[:shift]]


def round_plan(total: int, rounds: int, kinds: tuple[str, ...]) -> list[tuple[int, int, list[str]]]:
    """(first index, size, kinds in this round's order) for each round's share of total."""
    plan, first = [], 0
    for number, size in enumerate(chunks(total, rounds)):
        plan.append((first, size, rotated(kinds, number)))
        first += size
    return plan


def ratio(ours: float | None, peer: float | None) -> str:
    if ours is None or peer is None or peer == 0:
        return "n/a"
    return f"{ours / peer:.2f}x"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if unit == "ratio" else f"{value:,.0f}"


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_sizes_and_outputs(parser: argparse.ArgumentParser, steps: tuple[str, ...], sizes: Sizes) -> None:
    """The options both benchmarks take after their own: --quick, --only, one per size, --json, --markdown."""
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds (the smoke test)")
    parser.add_argument("--only", choices=steps, action="append", help="run only these lines (repeatable)")
    for name, (default, quick, meaning) in sizes.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=positive,
                            help=f"{meaning} (default {default}, --quick {quick})")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--markdown", action="store_true", help="also print the results as a Markdown table")


def parsed_with_sizes(parser: argparse.ArgumentParser, argv: list[str] | None, sizes: Sizes) -> argparse.Namespace:
    """The arguments, each size not given set to its default (or its --quick size)."""
    args = parser.parse_args(argv)
    for name, (default, quick, _) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else default)
    return args


def machine(**versions: Any) -> dict[str, Any]:
    """When and where a run was measured, with the versions of the systems it compares."""
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "apsw_sqlite": apsw.sqlite_lib_version(),
        **versions,
    }


def run_steps(steps: dict[str, Callable[[], None]], only: list[str] | None) -> None:
    """Each chosen step in the benchmark's order, with the time it took (its set-up included)."""
    for name, step in steps.items():
        if only is None or name in only:
            step_started = time.perf_counter()
            step()
            print(f"  ({name}: {time.perf_counter() - step_started:.1f} s with set-up)")


def print_durability(durability: dict[str, dict[str, str]], width: int) -> None:
    for kind, settings in durability.items():
        print(f"  {kind:{width}} " + ", ".join(f"{k}={v}" for k, v in settings.items()))


def write_results(args: argparse.Namespace, result: dict[str, Any], table: str) -> None:
    """The Markdown table printed (--markdown) and everything written as JSON (--json), as asked."""
    if args.markdown:
        print("\n" + table)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
