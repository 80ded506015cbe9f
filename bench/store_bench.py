"""Benchmark the durable core (console.core.Store) against persist-queue and huey, on one disk, in one run.

Every system gets a fresh SQLite file in its own folder under one parent folder (a temp dir under
/tmp, or --dir), so all of them write to the same disk. Each figure is printed with the ratio
ours / peer; --json writes everything, --markdown prints the tables recorded in docs/performance.md.

Durability is made comparable before anything is timed: our Store runs WAL + synchronous=FULL (an
acknowledged event survives power loss). persist-queue's SQLite queues set WAL and leave synchronous
at the library default, which for the stdlib SQLite here is FULL; huey's SqliteStorage is opened
with fsync=True (synchronous=FULL). The settings are read back from each live connection and
printed. Only unmeasured set-up (pre-filling a queue) runs with synchronous=OFF.

    python bench/store_bench.py            # defaults: about 1-3 minutes on 2 cores
    python bench/store_bench.py --quick    # a few seconds: the smoke test's size
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import shutil
import sqlite3
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import apsw
import huey
import persistqueue
from huey.storage import SqliteStorage
from persistqueue.exceptions import Empty

# The script runs as `python bench/store_bench.py`: make the checkout's console package importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import seed_reference
from bench.common import (
    Timings,
    add_sizes_and_outputs,
    fmt,
    parsed_with_sizes,
    print_durability,
    ratio,
    round_plan,
    run_steps,
    write_results,
)
from bench.common import machine as common_machine
from console.core import Store

NOW = 1_700_000_000  # the core takes integer seconds; a fixed clock keeps the lease live for the whole run
HOLDER = "bench-worker"
SOURCE = "bench"
IDLE_POLL_S = 0.001  # how long an idle consumer waits before polling again (same for every system)

CORE = "core (console.core.Store)"
PQ_ACK = "persist-queue SQLiteAckQueue"
PQ_UNIQUE = "persist-queue UniqueAckQ"
HUEY = "huey SqliteStorage"
SEED = "seeds' reference (inbox.py)"
KINDS = (CORE, PQ_ACK, PQ_UNIQUE, HUEY, SEED)
PEERS = KINDS[1:]


def payload(i: int) -> dict[str, Any]:
    return {"text": "a webhook delivery of ordinary size", "n": i, "tags": ["bench", "store"]}


class NotSupported(Exception):
    """The system has no way to do what a benchmark line measures."""


class Subject(ABC):
    """One queue under test, with one connection, behind the operations the benchmark lines need."""

    name: str

    @abstractmethod
    def ingest(self, key: str) -> bool:
        """Store one event durably, in its own transaction. False = refused as a duplicate."""

    def ingest_batch(self, keys: list[str]) -> None:
        raise NotSupported("no batch ingest in one transaction")

    @abstractmethod
    def step(self) -> int:
        """Claim and finish what one consumer step takes (one event, or one batch). Returns how many."""

    @abstractmethod
    def fill(self, keys: list[str]) -> None:
        """Unmeasured set-up: store these events as fast as the system allows."""

    def fill_done(self, count: int) -> None:
        """Unmeasured set-up: leave count finished events in the table, as long use would."""
        raise NotSupported("keeps no finished rows")

    @abstractmethod
    def durability(self) -> dict[str, str]: ...

    @abstractmethod
    def close(self) -> None: ...


class CoreSubject(Subject):
    name = CORE

    def __init__(self, folder: Path, *, consumer: bool = True, batch_cap: int = 100) -> None:
        self.store = Store.open(folder / "inbox.db", check=False, batch_cap=batch_cap)
        self.gen = 0
        if consumer:
            gen = self.store.acquire(HOLDER, now=NOW)
            assert gen is not None, "a fresh inbox has no other lease holder"
            self.gen = gen

    def ingest(self, key: str) -> bool:
        return self.store.ingest(SOURCE, key, payload(0), now=NOW)

    def ingest_batch(self, keys: list[str]) -> None:
        self.store.ingest_many([(SOURCE, key, payload(0)) for key in keys], now=NOW)

    def step(self) -> int:
        events = self.store.claim_batch(HOLDER, self.gen, now=NOW)
        if events and not self.store.finish(HOLDER, self.gen, [e.id for e in events], now=NOW):
            raise RuntimeError("the benchmark's own finish was refused")
        return len(events)

    def fill(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            self.ingest_batch(keys[start:start + 1000])

    def fill_done(self, count: int) -> None:
        self.fill([f"done-{i}" for i in range(count)])
        drained = 0
        while drained < count:
            drained += self.step()

    def durability(self) -> dict[str, str]:
        return connection_settings(self.store.connection.execute, f"apsw {apsw.sqlite_lib_version()}")

    def close(self) -> None:
        self.store.close()


class PersistQueueSubject(Subject):
    def __init__(self, folder: Path, *, unique: bool, consumer: bool = True) -> None:
        self.name = PQ_UNIQUE if unique else PQ_ACK
        queue_class = persistqueue.UniqueAckQ if unique else persistqueue.SQLiteAckQueue
        # A producer must not resume (reset) the consumer's unacknowledged items when it opens the file.
        self.queue = queue_class(str(folder), auto_resume=consumer)

    def ingest(self, key: str) -> bool:
        return self.queue.put({"source": SOURCE, "source_id": key, "payload": payload(0)}) is not None

    def step(self) -> int:
        try:
            item = self.queue.get(block=False, raw=True)
        except Empty:
            return 0
        self.queue.ack(id=item["pqid"])
        return 1

    def fill(self, keys: list[str]) -> None:
        with self._unsynced():
            for key in keys:
                self.ingest(key)

    def fill_done(self, count: int) -> None:
        with self._unsynced():
            for i in range(count):
                pqid = self.queue.put({"source": SOURCE, "source_id": f"done-{i}", "payload": payload(0)})
                self.queue.get(id=pqid, block=False)
                self.queue.ack(id=pqid)

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        conn = self.queue._putter  # persist-queue exposes no setting for this; set-up only
        before = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.execute("PRAGMA synchronous=OFF")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA synchronous={int(before)}")

    def durability(self) -> dict[str, str]:
        return connection_settings(self.queue._putter.execute, f"stdlib sqlite3 {sqlite3.sqlite_version}")

    def close(self) -> None:
        self.queue.close()


class HueySubject(Subject):
    name = HUEY

    def __init__(self, folder: Path, *, consumer: bool = True) -> None:
        # fsync=True makes huey set synchronous=FULL; its default (None) leaves the library default.
        self.storage = SqliteStorage(name="bench", filename=str(folder / "huey.db"), fsync=True)

    def ingest(self, key: str) -> bool:
        self.storage.enqueue(json.dumps({"source": SOURCE, "source_id": key, "payload": payload(0)}).encode())
        return True

    def step(self) -> int:
        return 0 if self.storage.dequeue() is None else 1

    def fill(self, keys: list[str]) -> None:
        conn = self.storage.conn
        conn.execute("PRAGMA synchronous=OFF")
        try:
            for key in keys:
                self.ingest(key)
        finally:
            conn.execute("PRAGMA synchronous=FULL")

    def durability(self) -> dict[str, str]:
        return connection_settings(self.storage.conn.execute, f"stdlib sqlite3 {sqlite3.sqlite_version}")

    def close(self) -> None:
        self.storage.close()


class SeedSubject(Subject):
    """The article the project grew from (bench/seed_reference.py): its ingest, lease, claim and finish."""

    name = SEED

    def __init__(self, folder: Path, *, consumer: bool = True) -> None:
        self.db = seed_reference.connect(str(folder / "agent.db"))
        self.gen = 0
        if consumer:
            gen = seed_reference.acquire(self.db, HOLDER, NOW)
            assert gen is not None, "a fresh file has no other lease holder"
            self.gen = gen

    def ingest(self, key: str) -> bool:
        return seed_reference.ingest(self.db, SOURCE, key, payload(0))

    def step(self) -> int:
        rows = seed_reference.claim_batch(self.db, HOLDER, self.gen, NOW)
        if rows and not seed_reference.finish(self.db, HOLDER, self.gen, NOW, [row[0] for row in rows]):
            raise RuntimeError("the benchmark's own finish was refused")
        return len(rows)

    def fill(self, keys: list[str]) -> None:
        before = self.db.execute("PRAGMA synchronous").fetchone()[0]
        self.db.execute("PRAGMA synchronous=OFF")
        try:
            for key in keys:
                self.ingest(key)
        finally:
            self.db.execute(f"PRAGMA synchronous={int(before)}")

    def fill_done(self, count: int) -> None:
        self.fill([f"done-{i}" for i in range(count)])
        self.step()  # the reference claims every pending event at once

    def durability(self) -> dict[str, str]:
        return connection_settings(self.db.execute, f"stdlib sqlite3 {sqlite3.sqlite_version}")

    def close(self) -> None:
        self.db.close()


def connection_settings(execute: Callable[[str], Any], library: str) -> dict[str, str]:
    def pragma(name: str) -> str:
        for row in execute(f"PRAGMA {name}"):
            return str(row[0])
        return "?"

    synchronous = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}.get(pragma("synchronous"), "?")
    return {"library": library, "journal_mode": pragma("journal_mode"), "synchronous": synchronous}


def open_subject(kind: str, folder: Path, *, consumer: bool = True, batch_cap: int = 100) -> Subject:
    folder.mkdir(parents=True, exist_ok=True)
    if kind == CORE:
        return CoreSubject(folder, consumer=consumer, batch_cap=batch_cap)
    if kind in (PQ_ACK, PQ_UNIQUE):
        return PersistQueueSubject(folder, unique=kind == PQ_UNIQUE, consumer=consumer)
    if kind == HUEY:
        return HueySubject(folder, consumer=consumer)
    if kind == SEED:
        return SeedSubject(folder, consumer=consumer)
    raise ValueError(f"unknown system {kind!r}")


# --- results ------------------------------------------------------------------------------------
@dataclass
class Line:
    """One benchmark line: a figure per system, and the target it is held to."""

    key: str
    title: str
    unit: str
    figures: dict[str, float | None] = field(default_factory=dict)  # None = the system cannot do it
    notes: dict[str, str] = field(default_factory=dict)
    goal: float | None = None  # an absolute target for ours (a ratio line); None = beat the best peer

    def best_peer(self) -> tuple[str, float] | None:
        measured = [(k, v) for k, v in self.figures.items() if k != CORE and v is not None]
        return max(measured, key=lambda kv: kv[1]) if measured else None

    def met(self) -> bool | None:
        ours = self.figures.get(CORE)
        if ours is None:
            return None
        if self.goal is not None:
            return ours >= self.goal
        best = self.best_peer()
        return None if best is None else ours >= best[1]

    def target(self) -> str:
        met = self.met()
        if met is None:
            return "no peer can do this"
        verdict = "met" if met else "MISSED"
        if self.goal is not None:
            return f"{verdict} (target >= {self.goal:g})"
        best = self.best_peer()
        assert best is not None
        return f"{verdict} ({ratio(self.figures.get(CORE), best[1])} of {short(best[0])})"


def short(kind: str) -> str:
    return {CORE: "core", PQ_ACK: "SQLiteAckQueue", PQ_UNIQUE: "UniqueAckQ", HUEY: "huey", SEED: "reference"}[kind]


class Bench:
    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.lines: list[Line] = []
        self.durability: dict[str, dict[str, str]] = {}
        self.claim_plans: dict[str, list[str]] = {}
        self._folders = 0

    def folder(self) -> Path:
        self._folders += 1
        return self.root / f"{self._folders:03d}"

    def fresh(self, kind: str, *, consumer: bool = True) -> Subject:
        subject = open_subject(kind, self.folder(), consumer=consumer, batch_cap=self.args.batch_cap)
        self.durability.setdefault(kind, subject.durability())
        return subject

    def fresh_all(self, kinds: tuple[str, ...] = KINDS) -> dict[str, Subject]:
        return {kind: self.fresh(kind) for kind in kinds}

    def rounds(self, total: int) -> list[tuple[int, int, list[str]]]:
        return round_plan(total, self.args.rounds, KINDS)

    def record(self, *lines: Line) -> None:
        for line in lines:
            self.lines.append(line)
            print_line(line)

    # 1 -------------------------------------------------------------------------------------------
    def durable_ingest(self) -> None:
        n = self.args.ingest
        line = Line("ingest", f"durable ingest, one transaction each ({n} events)", "events/s")
        subjects, timings = self.fresh_all(), Timings()
        for first, size, order in self.rounds(n):
            for kind in order:
                with timings.timed(kind) as done:
                    done[0] = sum(subjects[kind].ingest(f"e{i}") for i in range(first, first + size))
                assert done[0] == size, f"{kind} stored {done[0]} of {size} distinct events"
        for kind, subject in subjects.items():
            line.figures[kind] = timings.rate(kind)
            subject.close()
        self.record(line)

    # 2 -------------------------------------------------------------------------------------------
    def refused_duplicates(self) -> None:
        n = self.args.duplicates
        line = Line("duplicates", f"refused duplicates ({n} repeats of stored events)", "refusals/s")
        able = (CORE, PQ_UNIQUE, SEED)
        subjects, timings = self.fresh_all(able), Timings()
        keys = [f"e{i}" for i in range(n)]
        for subject in subjects.values():
            subject.fill(keys)
        for first, size, order in self.rounds(n):
            for kind in (k for k in order if k in able):
                with timings.timed(kind) as done:
                    done[0] = sum(not subjects[kind].ingest(key) for key in keys[first:first + size])
                assert done[0] == size, f"{kind} refused {done[0]} of {size} duplicates"
        for kind in KINDS:
            line.figures[kind] = timings.rate(kind) if kind in able else None
        for subject in subjects.values():
            subject.close()
        line.notes[CORE] = ("a refusal is a read; the copy's count is held in memory and written with the store's "
                            "next write (the duplicate ledger)")
        line.notes[PQ_UNIQUE] = "a refusal is a failed INSERT, rolled back: nothing is written"
        line.notes[SEED] = "a refusal is an INSERT OR IGNORE that meets the key: nothing is written"
        line.notes[PQ_ACK] = line.notes[HUEY] = "cannot refuse duplicates (no key): a repeat is stored again"
        self.record(line)

    # 3 -------------------------------------------------------------------------------------------
    def drain(self) -> None:
        n = self.args.drain
        line = Line("drain", f"drain {n} events (claim + finish)", "events/s")
        subjects, timings = self.fresh_all(), Timings()
        for subject in subjects.values():
            subject.fill([f"e{i}" for i in range(n)])
        for _first, size, order in self.rounds(n):
            for kind in order:
                with timings.timed(kind) as done:
                    while done[0] < size and (got := subjects[kind].step()) > 0:
                        done[0] += got
        for kind, subject in subjects.items():
            assert timings.count[kind] == n, f"{kind} drained {timings.count[kind]} of {n}"
            assert subject.step() == 0, f"{kind} still had events after draining {n}"
            line.figures[kind] = timings.rate(kind)
            subject.close()
        line.notes[CORE] = f"claim_batch + finish, {self.args.batch_cap} events per batch: two transactions a batch"
        line.notes[PQ_ACK] = line.notes[PQ_UNIQUE] = "get + ack: two transactions per event"
        line.notes[HUEY] = "dequeue: one transaction per event (deletes the row: no finish, at-most-once)"
        line.notes[SEED] = "claim_batch takes every pending event at once, then finish: two transactions"
        self.record(line)

    # 4 -------------------------------------------------------------------------------------------
    def cycles(self) -> None:
        n, rows = self.args.cycles, self.args.table_rows
        empty = Line("cycle_empty", f"ingest -> claim -> finish one at a time, empty table ({n} cycles)", "cycles/s")
        full = Line("cycle_full", f"the same cycle with {rows} finished rows in the table", "cycles/s")
        flat = Line("cycle_flat", f"cycle rate with {rows} finished rows / with an empty table", "ratio", goal=0.9)
        small, large = self.fresh_all(), self.fresh_all()
        for kind, subject in list(large.items()):
            try:
                subject.fill_done(rows)
            except NotSupported as exc:
                full.notes[kind] = f"{exc}: a dequeue deletes the row, so its table never grows"
                subject.close()
                del large[kind]
        small_t, large_t = Timings(), Timings()
        for first, size, order in self.rounds(n):
            for kind in order:
                for subjects, timings in ((small, small_t), (large, large_t)):
                    if kind not in subjects:
                        continue
                    with timings.timed(kind) as done:
                        for i in range(first, first + size):
                            subjects[kind].ingest(f"c{i}")
                            if subjects[kind].step() != 1:
                                raise RuntimeError(f"{kind}: a cycle did not claim exactly its one event")
                            done[0] += 1
        for kind in KINDS:
            empty.figures[kind] = small_t.rate(kind)
            full.figures[kind] = large_t.rate(kind) if kind in large else None
            after = full.figures[kind]
            flat.figures[kind] = None if after is None else after / small_t.rate(kind)
        core = large.get(CORE)
        if isinstance(core, CoreSubject):
            self.claim_plans = core.store.explain_claim()
        for subject in (*small.values(), *large.values()):
            subject.close()
        empty.notes[CORE] = "three transactions per cycle; only the ingest's waits for an fsync"
        empty.notes[PQ_ACK] = empty.notes[PQ_UNIQUE] = "put + get + ack: three transactions per cycle"
        empty.notes[HUEY] = "enqueue + dequeue: two transactions per cycle (no finish step)"
        empty.notes[SEED] = "ingest + claim_batch + finish: three transactions per cycle"
        full.notes[SEED] = "claim_batch's first UPDATE reads every row (no index on status)"
        full.notes[PQ_ACK] = full.notes[PQ_UNIQUE] = "get walks the acked rows from the start (no index on status)"
        flat.notes[CORE] = "target: flat in table size (>= 0.9 allows for noise)"
        self.record(empty, full, flat)
        print(f"  claim query plans with {rows} finished rows (a plain 'SCAN inbox' would read the whole table):")
        for name, plan in self.claim_plans.items():
            print(f"    {name:12} {' / '.join(plan)}")
        scans = table_scans(self.claim_plans)
        print(f"  -> {'table scans in: ' + ', '.join(scans) if scans else 'no claim statement scans the table'}")

    # 5 -------------------------------------------------------------------------------------------
    def producers(self) -> None:
        procs, per = self.args.producers, self.args.per_producer
        total = procs * per
        line = Line("producers", f"{procs} producer processes + 1 consumer ({total} events, until all consumed)",
                    "events/s")
        timings = Timings()
        folders = {kind: self.folder() for kind in KINDS}
        for kind, folder in folders.items():
            open_subject(kind, folder).close()  # create the schema before the producers race for it
        for first, size, order in self.rounds(per):
            for kind in order:
                with timings.timed(kind) as done:
                    done[0] = self._produce_and_consume(kind, folders[kind], first, size)
        for kind in KINDS:
            line.figures[kind] = timings.rate(kind)
        line.notes[CORE] = "consumer: claim_batch + finish; producers: one ingest transaction per event"
        line.notes[PQ_ACK] = line.notes[PQ_UNIQUE] = "consumer: get + ack per event"
        line.notes[HUEY] = "consumer: dequeue per event"
        line.notes[SEED] = "consumer: claim_batch (every pending event) + finish"
        self.record(line)

    def _produce_and_consume(self, kind: str, folder: Path, first: int, per: int) -> int:
        """Start the producers, then consume everything they make; the caller times this round."""
        total = self.args.producers * per
        context = mp.get_context("fork")  # the parent holds no open database while it forks
        go = context.Event()
        ready = context.Barrier(self.args.producers + 1)
        workers = [
            context.Process(target=produce, args=(kind, str(folder), p, first, per, ready, go))
            for p in range(self.args.producers)
        ]
        for worker in workers:
            worker.start()
        consumer = open_subject(kind, folder, batch_cap=self.args.batch_cap)
        ready.wait(timeout=120)
        go.set()
        consumed = 0
        while consumed < total:
            got = consumer.step()
            consumed += got
            if got == 0:
                if any(w.exitcode not in (None, 0) for w in workers):
                    raise RuntimeError(f"{kind}: a producer failed")
                time.sleep(IDLE_POLL_S)
        for worker in workers:
            worker.join(timeout=60)
            if worker.exitcode != 0:
                raise RuntimeError(f"{kind}: a producer exited with {worker.exitcode}")
        consumer.close()
        return consumed

    # 6 -------------------------------------------------------------------------------------------
    def group_commit(self) -> None:
        single_n, many_n, batch = self.args.ingest, self.args.group_events, self.args.group_batch
        group = Line("group", f"group-committed ingest: ingest_many, {batch} events a call ({many_n} events)",
                     "events/s")
        versus = Line("group_ratio", "group-committed / single-transaction ingest (ours)", "ratio", goal=10)
        batched, single = self.fresh(CORE), self.fresh(CORE)
        timings = Timings()
        keys = [f"g{i}" for i in range(many_n)]
        for (first, size, _), (one_first, one_size, _) in zip(self.rounds(many_n), self.rounds(single_n), strict=True):
            with timings.timed("group") as done:
                for at in range(first, first + size, batch):
                    part = keys[at:min(at + batch, first + size)]
                    batched.ingest_batch(part)
                    done[0] += len(part)
            with timings.timed("single") as done:
                done[0] = sum(single.ingest(f"s{i}") for i in range(one_first, one_first + one_size))
        batched.close()
        single.close()
        group.figures[CORE] = timings.rate("group")
        for kind in PEERS:
            group.figures[kind] = None
            group.notes[kind] = "no way to put many items in one transaction"
        versus.figures[CORE] = timings.rate("group") / timings.rate("single")
        versus.notes[CORE] = f"single-transaction ingest in the same rounds: {timings.rate('single'):,.0f} events/s"
        self.record(group, versus)


def table_scans(plans: dict[str, list[str]]) -> list[str]:
    """The claim statements whose plan reads the inbox table itself end to end (not through an index)."""
    return [name for name, plan in plans.items()
            if any(step.startswith("SCAN inbox") and "INDEX" not in step for step in plan)]


def produce(kind: str, folder: str, index: int, first: int, count: int, ready: Any, go: MpEvent) -> None:
    """One producer process: open the queue, wait for the start, ingest count events one by one."""
    subject = open_subject(kind, Path(folder), consumer=False)
    ready.wait(timeout=120)
    go.wait(timeout=120)
    for i in range(first, first + count):
        if not subject.ingest(f"p{index}-{i}"):
            raise RuntimeError(f"{kind}: producer {index} saw its own new event refused")
    subject.close()


# --- output -------------------------------------------------------------------------------------
def print_line(line: Line) -> None:
    ours = line.figures.get(CORE)
    print(f"\n{line.title} [{line.unit}]")
    for kind, value in line.figures.items():
        versus = "" if kind == CORE or line.goal is not None else f"   ours/peer {ratio(ours, value)}"
        note = f"   ({line.notes[kind]})" if kind in line.notes else ""
        print(f"  {kind:30} {fmt(value, line.unit):>9}{versus}{note}")
    print(f"  -> target {line.target()}")


def markdown(lines: list[Line]) -> str:
    """The table recorded in docs/performance.md: each peer's figure with ours/peer in brackets."""
    head = ["line", "unit", *(short(kind) for kind in KINDS), "target"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines:
        cells = [line.title, line.unit]
        for kind in KINDS:
            value = line.figures.get(kind)
            cell = fmt(value, line.unit)
            if kind != CORE and value is not None and line.goal is None:
                cell += f" ({ratio(line.figures.get(CORE), value)})"
            cells.append(cell)
        cells.append(line.target())
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def machine() -> dict[str, Any]:
    return common_machine(stdlib_sqlite=sqlite3.sqlite_version, persist_queue=persistqueue.__version__,
                          huey=huey.__version__)


# --- command line -------------------------------------------------------------------------------
STEPS = ("ingest", "duplicates", "drain", "cycles", "producers", "group")

# Sizes: the defaults finish in about 1-3 minutes on 2 cores; --quick in a few seconds (the smoke test).
SIZES = {
    "ingest": (2000, 30, "events for single-transaction ingest"),
    "duplicates": (2000, 30, "refused duplicates to time"),
    "drain": (20000, 200, "events to drain"),
    "cycles": (700, 16, "one-at-a-time cycles per table size"),
    "table_rows": (100_000, 200, "finished rows in the large table"),
    "producers": (4, 2, "producer processes"),
    "per_producer": (1500, 15, "events per producer"),
    "group_events": (20000, 400, "events for group-committed ingest"),
    "group_batch": (100, 100, "events per ingest_many call"),
    "rounds": (7, 2, "interleaved rounds each line is split into"),
    "batch_cap": (100, 100, "our Store's claim batch cap"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, help="parent folder for the databases (default: a temp dir under /tmp)")
    add_sizes_and_outputs(parser, STEPS, SIZES)
    return parsed_with_sizes(parser, argv, SIZES)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir is not None and not args.dir.is_dir():
        print(f"store_bench: --dir {args.dir} is not a folder", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    info = machine()
    print(f"store benchmark, {info['date']}, {info['cpus']} CPUs, Python {info['python']}, databases in {root}")
    print(f"core: apsw SQLite {info['apsw_sqlite']}; peers: stdlib SQLite {info['stdlib_sqlite']}, "
          f"persist-queue {info['persist_queue']}, huey {info['huey']}")
    bench = Bench(root, args)
    steps = {"ingest": bench.durable_ingest, "duplicates": bench.refused_duplicates, "drain": bench.drain,
             "cycles": bench.cycles, "producers": bench.producers, "group": bench.group_commit}
    started = time.perf_counter()
    try:
        run_steps(steps, args.only)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if bench.durability:
        print("\ndurability as read back from each live connection:")
        print_durability(bench.durability, 30)
    elapsed = time.perf_counter() - started
    print(f"\nfinished in {elapsed:.1f} s")
    result = {
        "machine": info,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "seconds": elapsed,
        "durability": bench.durability,
        "claim_plans": bench.claim_plans,
        "lines": [{**vars(line), "met": line.met(), "target": line.target()} for line in bench.lines],
    }
    write_results(args, result, markdown(bench.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
