"""Benchmark our Store on PostgreSQL against our Store on SQLite and a PostgreSQL queue (pgqueuer), in one run.

The workloads are bench/store_bench.py's (durable single ingest, refused duplicates, drain, the
one-at-a-time cycle on an empty and a large table, 4 producer processes + 1 consumer, group-committed
ingest), plus what PostgreSQL is for: two engines on two connections sharing one inbox, one holding the
lease while the other stands by (trying to acquire, reading status as a console does) and a producer
ingests. Each figure is printed with ours / pgqueuer; --json writes everything, --markdown prints the
tables recorded in docs/performance.md.

The peer is pgqueuer (its own Queries: enqueue / dequeue / log_jobs, on a psycopg async connection):
it batches like we do (enqueue many jobs in one statement, dequeue a batch, finish a batch), refuses a
repeated dedupe_key, and keeps a log row for every job, so every line has a like-for-like operation.

The script starts its own throwaway PostgreSQL server (tests/pg_server.py, with fsync and
synchronous_commit on: an acknowledged commit survives power loss), or uses --url. The SQLite files go
in a temp dir under /tmp (or --dir). Durability settings are read back from the live connections.

    python bench/postgres_bench.py --markdown     # the figures in docs/performance.md (a few minutes)
    python bench/postgres_bench.py --quick        # seconds: the smoke test's size
    python bench/postgres_bench.py --url postgresql://me@db.example:5432/bench
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python bench/postgres_bench.py`: the checkout's packages

import pgqueuer  # noqa: E402
import psycopg  # noqa: E402
from pgqueuer import Queries  # noqa: E402
from pgqueuer.ports.repository import EntrypointExecutionParameter  # noqa: E402
from pgqueuer.types import QueueEntrypoint, QueueManagerId  # noqa: E402

from bench.common import (  # noqa: E402
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
from bench.common import machine as common_machine  # noqa: E402
from bench.store_bench import (  # noqa: E402
    HOLDER,
    IDLE_POLL_S,
    NOW,
    CoreSubject,
    payload,
)
from console.core import Store  # noqa: E402

PG = "ours on PostgreSQL"
SQLITE = "ours on SQLite"
PGQ = "pgqueuer"
KINDS = (PG, SQLITE, PGQ)
SHORT = {PG: "ours (PostgreSQL)", SQLITE: "ours (SQLite)", PGQ: "pgqueuer"}
ENTRYPOINT = "bench"


# --- the systems ----------------------------------------------------------------------------------
class StoreSubject:
    """Our Store (either backend) behind the operations the lines need; store_bench's CoreSubject does
    the work, so both benchmarks measure exactly the same calls."""

    def __init__(self, name: str, core: CoreSubject) -> None:
        self.name = name
        self.core = core

    def ingest_each(self, keys: list[str]) -> int:
        return sum(self.core.ingest(key) for key in keys)

    def refuse_each(self, keys: list[str]) -> int:
        return sum(not self.core.ingest(key) for key in keys)

    def ingest_batches(self, keys: list[str], batch: int) -> int:
        for at in range(0, len(keys), batch):
            self.core.ingest_batch(keys[at:at + batch])
        return len(keys)

    def drain(self, count: int) -> int:
        done = 0
        while done < count and (got := self.core.step()) > 0:
            done += got
        return done

    def cycle_each(self, keys: list[str]) -> int:
        for key in keys:
            self.core.ingest(key)
            if self.core.step() != 1:
                raise RuntimeError(f"{self.name}: a cycle did not claim exactly its one event")
        return len(keys)

    def step(self) -> int:
        return self.core.step()

    def fill(self, keys: list[str]) -> None:
        self.core.fill(keys)

    def fill_done(self, count: int) -> None:
        self.core.fill_done(count)

    def durability(self) -> dict[str, str]:
        store = self.core.store
        if store.backend == "postgresql":
            return {"library": f"psycopg {psycopg.__version__}", **store.durability_settings(),
                    "claims and finishes": "synchronous_commit off (SET LOCAL), as SQLite's NORMAL"}
        return {**self.core.durability(), "claims and finishes": "synchronous=NORMAL"}

    def close(self) -> None:
        self.core.close()


class PgCoreSubject(CoreSubject):
    """store_bench's CoreSubject on a PostgreSQL inbox (a schema of its own) instead of a SQLite file."""

    def __init__(self, url: str, *, consumer: bool = True, batch_cap: int = 100) -> None:
        self.store = Store.open(url, batch_cap=batch_cap)
        self.gen = 0
        if consumer:
            gen = self.store.acquire(HOLDER, now=NOW)
            assert gen is not None, "a fresh inbox has no other lease holder"
            self.gen = gen


class PgqSubject:
    """pgqueuer's own operations, on one psycopg async connection (autocommit, as pgqueuer requires).

    Each measured loop runs inside one coroutine, so the event loop's cost is paid per call as it would
    be in an application, not per hop between this synchronous script and the loop."""

    name = PGQ

    def __init__(self, url: str, schema: str, *, batch: int = 100, install: bool = True) -> None:
        self.loop = asyncio.new_event_loop()
        self.batch = batch
        self.conn: psycopg.AsyncConnection[Any] = self.run(psycopg.AsyncConnection.connect(
            url, autocommit=True, options=f"-c search_path={schema}"))
        self.queries = Queries.from_psycopg_connection(self.conn)
        if install:
            self.run(self._install(schema))
        self.entrypoints = {QueueEntrypoint(ENTRYPOINT): EntrypointExecutionParameter(concurrency_limit=0)}
        self.manager = QueueManagerId(uuid.uuid4())

    async def _install(self, schema: str) -> None:
        await self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')  # the peer's own set-up
        if not await self.queries.schema_is_installed():
            await self.queries.install()

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(work)

    @staticmethod
    def body(key: str) -> bytes:
        return json.dumps({"source": "bench", "source_id": key, "payload": payload(0)}).encode()

    async def _ingest(self, key: str) -> bool:
        ids = await self.queries.enqueue(ENTRYPOINT, self.body(key), dedupe_key=key, on_conflict="skip")
        return ids[0] is not None

    async def _ingest_many(self, keys: list[str]) -> None:
        await self.queries.enqueue([ENTRYPOINT] * len(keys), [self.body(k) for k in keys], [0] * len(keys),
                                   dedupe_key=list(keys), on_conflict="skip")

    async def _step(self, batch: int) -> int:
        jobs = await self.queries.dequeue(batch, self.entrypoints, self.manager, None, timedelta(seconds=30))
        if jobs:
            await self.queries.log_jobs([(job, "successful", None) for job in jobs])
        return len(jobs)

    def ingest_each(self, keys: list[str]) -> int:
        async def work() -> int:
            return sum([await self._ingest(key) for key in keys])
        return int(self.run(work()))

    def refuse_each(self, keys: list[str]) -> int:
        async def work() -> int:
            return sum([not await self._ingest(key) for key in keys])
        return int(self.run(work()))

    def ingest_batches(self, keys: list[str], batch: int) -> int:
        async def work() -> None:
            for at in range(0, len(keys), batch):
                await self._ingest_many(keys[at:at + batch])
        self.run(work())
        return len(keys)

    def drain(self, count: int) -> int:
        async def work() -> int:
            done = 0
            while done < count and (got := await self._step(self.batch)) > 0:
                done += got
            return done
        return int(self.run(work()))

    def cycle_each(self, keys: list[str]) -> int:
        async def work() -> int:
            for key in keys:
                await self._ingest(key)
                if await self._step(self.batch) != 1:
                    raise RuntimeError("pgqueuer: a cycle did not dequeue exactly its one job")
            return len(keys)
        return int(self.run(work()))

    def step(self) -> int:
        return int(self.run(self._step(self.batch)))

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        self.run(self.conn.execute("SET synchronous_commit TO off"))  # untimed set-up only
        try:
            yield
        finally:
            self.run(self.conn.execute("SET synchronous_commit TO on"))

    def fill(self, keys: list[str]) -> None:
        with self._unsynced():
            for at in range(0, len(keys), 1000):
                self.run(self._ingest_many(keys[at:at + 1000]))

    def fill_done(self, count: int) -> None:
        with self._unsynced():
            for at in range(0, count, 1000):
                size = min(1000, count - at)
                self.run(self._ingest_many([f"done-{i}" for i in range(at, at + size)]))
                drained = 0
                while drained < size:
                    drained += self.run(self._step(1000))

    def durability(self) -> dict[str, str]:
        async def read() -> dict[str, str]:
            settings = {"library": f"pgqueuer {pgqueuer.__version__} on psycopg {psycopg.__version__}"}
            for name in ("synchronous_commit",):
                cursor = await self.conn.execute(f"SHOW {name}")
                row = await cursor.fetchone()
                settings[name] = str(row[0]) if row else "?"
            cursor = await self.conn.execute(
                "SELECT string_agg(DISTINCT relpersistence::text, ',') FROM pg_class "
                "WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'")
            row = await cursor.fetchone()
            settings["tables"] = {"p": "logged", "u": "UNLOGGED"}.get(str(row[0] if row else "?"), str(row))
            return settings
        return dict(self.run(read()))

    def close(self) -> None:
        self.run(self.conn.close())
        self.loop.close()


Subject = StoreSubject | PgqSubject


# --- results ----------------------------------------------------------------------------------------
@dataclass
class Line:
    key: str
    title: str
    unit: str
    figures: dict[str, float | None] = field(default_factory=dict)  # None = the system cannot do it
    notes: dict[str, str] = field(default_factory=dict)


def print_line(line: Line) -> None:
    print(f"\n{line.title} [{line.unit}]")
    peer = line.figures.get(PGQ)
    for kind, value in line.figures.items():
        versus = f"   /pgqueuer {ratio(value, peer)}" if kind != PGQ and peer is not None else ""
        note = f"   ({line.notes[kind]})" if kind in line.notes else ""
        print(f"  {kind:20} {fmt(value, line.unit):>9}{versus}{note}")


def markdown(lines: list[Line]) -> str:
    """The table docs/performance.md records: ours with ours / pgqueuer in brackets, and PostgreSQL / SQLite."""
    head = ["line", "unit", SHORT[PG], SHORT[SQLITE], SHORT[PGQ], "ours PostgreSQL / SQLite"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines:
        peer = line.figures.get(PGQ)
        cells = [line.title, line.unit]
        for kind in KINDS:
            value = line.figures.get(kind)
            cell = fmt(value, line.unit)
            if kind != PGQ and value is not None and peer is not None and line.unit != "ratio":
                cell += f" ({ratio(value, peer)})"
            cells.append(cell)
        cells.append(ratio(line.figures.get(PG), line.figures.get(SQLITE)))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


class Bench:
    def __init__(self, url: str, root: Path, args: argparse.Namespace) -> None:
        self.url = url  # the server's database; every inbox and peer queue gets a schema of its own in it
        self.root = root
        self.args = args
        self.lines: list[Line] = []
        self.durability: dict[str, dict[str, str]] = {}
        self.claim_plans: dict[str, list[str]] = {}
        self.pair: list[dict[str, Any]] = []
        self._made = 0
        self.schemas: list[str] = []

    def place(self) -> tuple[Path, str]:
        """A fresh SQLite folder and a fresh schema name."""
        self._made += 1
        folder = self.root / f"{self._made:03d}"
        folder.mkdir(parents=True)
        self.schemas.append(f"bench_{os.getpid()}_{self._made:03d}")
        return folder, self.schemas[-1]

    def open(self, kind: str, where: tuple[Path, str], *, consumer: bool = True) -> Subject:
        return open_subject(kind, where, self.url, batch_cap=self.args.batch_cap, consumer=consumer)

    def fresh(self, kind: str) -> Subject:
        subject = self.open(kind, self.place())
        self.durability.setdefault(kind, subject.durability())
        return subject

    def fresh_all(self) -> dict[str, Subject]:
        return {kind: self.fresh(kind) for kind in KINDS}

    def rounds(self, total: int) -> list[tuple[int, int, list[str]]]:
        return round_plan(total, self.args.rounds, KINDS)

    def record(self, *lines: Line) -> None:
        for line in lines:
            self.lines.append(line)
            print_line(line)

    def timed_rounds(self, total: int, subjects: dict[str, Subject],
                     work: Callable[[Subject, int, int], int], *also: dict[str, Subject]) -> list[Timings]:
        """Each system does its share of total in every round, on subjects and then on each of also (so a
        slow spell on the shared machine lands on both table sizes alike); a figure is the median round's
        rate. One Timings per set of subjects."""
        sets = [subjects, *also]
        timings = [Timings() for _ in sets]
        for first, size, order in self.rounds(total):
            for kind in order:
                for group, timing in zip(sets, timings, strict=True):
                    with timing.timed(kind) as done:
                        done[0] = work(group[kind], first, size)
        for timing in timings:
            for kind in subjects:
                if timing.count.get(kind) != total:  # a drain's batches may overrun a round's share, not the total
                    raise RuntimeError(f"{kind}: {timing.count.get(kind)} of {total}")
        return timings

    # 1 ---------------------------------------------------------------------------------------------
    def durable_ingest(self) -> None:
        n = self.args.ingest
        line = Line("ingest", f"durable ingest, one transaction each ({n} events)", "events/s")
        subjects = self.fresh_all()
        [timings] = self.timed_rounds(n, subjects, lambda s, a, k: s.ingest_each([f"e{i}" for i in range(a, a + k)]))
        for kind, subject in subjects.items():
            line.figures[kind] = timings.rate(kind)
            subject.close()
        line.notes[PG] = "one statement: inbox_ingest_one() (the writers' lock, the move mark, the INSERT, NOTIFY)"
        line.notes[PGQ] = "enqueue with a dedupe_key (the event's key), one statement"
        self.record(line)

    # 2 ---------------------------------------------------------------------------------------------
    def refused_duplicates(self) -> None:
        n = self.args.duplicates
        line = Line("duplicates", f"refused duplicates ({n} repeats of stored events)", "refusals/s")
        subjects = self.fresh_all()
        keys = [f"e{i}" for i in range(n)]
        for subject in subjects.values():
            subject.fill(keys)
        [timings] = self.timed_rounds(n, subjects, lambda s, a, k: s.refuse_each(keys[a:a + k]))
        for kind, subject in subjects.items():
            line.figures[kind] = timings.rate(kind)
            subject.close()
        line.notes[SQLITE] = "a read; the copy's count is held in memory and written with the store's next write"
        line.notes[PG] = ("inbox_ingest_one() refuses it (then a read while counts are held); the count as on "
                          "SQLite")
        line.notes[PGQ] = "enqueue ON CONFLICT DO NOTHING on its dedupe index: writes nothing"
        self.record(line)

    # 3 ---------------------------------------------------------------------------------------------
    def drain(self) -> None:
        n = self.args.drain
        line = Line("drain", f"drain {n} events (claim + finish)", "events/s")
        subjects = self.fresh_all()
        for subject in subjects.values():
            subject.fill([f"d{i}" for i in range(n)])
        [timings] = self.timed_rounds(n, subjects, lambda s, a, k: s.drain(k))
        for kind, subject in subjects.items():
            if subject.step() != 0:
                raise RuntimeError(f"{kind} still had events after draining {n}")
            line.figures[kind] = timings.rate(kind)
            subject.close()
        cap = self.args.batch_cap
        line.notes[PG] = line.notes[SQLITE] = f"claim_batch + finish, {cap} a batch: two transactions a batch"
        line.notes[PG] += " (one round trip each: inbox_claim_fresh(), inbox_finish_done())"
        line.notes[PGQ] = f"dequeue {cap} + log_jobs: two statements a batch"
        self.record(line)

    # 4 ---------------------------------------------------------------------------------------------
    def cycles(self) -> None:
        n, rows = self.args.cycles, self.args.table_rows
        empty = Line("cycle_empty", f"ingest -> claim -> finish one at a time, empty table ({n} cycles)", "cycles/s")
        full = Line("cycle_full", f"the same cycle with {rows} finished rows in the table", "cycles/s")
        flat = Line("cycle_flat", f"cycle rate with {rows} finished rows / with an empty table", "ratio")
        small, large = self.fresh_all(), self.fresh_all()
        for subject in large.values():
            subject.fill_done(rows)
        small_t, large_t = self.timed_rounds(
            n, small, lambda s, a, k: s.cycle_each([f"c{i}" for i in range(a, a + k)]), large)
        for kind in KINDS:
            empty.figures[kind] = small_t.rate(kind)
            full.figures[kind] = large_t.rate(kind)
            flat.figures[kind] = large_t.rate(kind) / small_t.rate(kind)
        pg = large[PG]
        if isinstance(pg, StoreSubject):
            self.claim_plans = pg.core.store.explain_claim()
        for subject in (*small.values(), *large.values()):
            subject.close()
        empty.notes[PG] = empty.notes[SQLITE] = "three transactions a cycle; only the ingest waits for the disk"
        empty.notes[PGQ] = "enqueue + dequeue + log_jobs: three statements, each waits for the disk"
        full.notes[PGQ] = "finished jobs leave its queue table for its log table"
        self.record(empty, full, flat)
        print(f"  claim plans on PostgreSQL with {rows} finished rows:")
        for name, plan in self.claim_plans.items():
            print(f"    {name:12} {' / '.join(plan)}")

    # 5 ---------------------------------------------------------------------------------------------
    def producers(self) -> None:
        procs, per = self.args.producers, self.args.per_producer
        line = Line("producers", f"{procs} producer processes + 1 consumer ({procs * per} events, until all consumed)",
                    "events/s")
        places = {kind: self.place() for kind in KINDS}
        for kind, where in places.items():
            self.open(kind, where).close()  # the schema exists before the producers race for it
        timings = Timings()
        for first, size, order in self.rounds(per):
            for kind in order:
                done, seconds = self._produce_and_consume(kind, places[kind], first, size)
                timings.count[kind] = timings.count.get(kind, 0) + done
                timings.per_round.setdefault(kind, []).append(done / seconds)
        for kind in KINDS:
            line.figures[kind] = timings.rate(kind)
        line.notes[PG] = line.notes[SQLITE] = "consumer: claim_batch + finish; producers: one ingest each"
        line.notes[PGQ] = "consumer: dequeue + log_jobs; producers: one enqueue each"
        self.record(line)

    def _produce_and_consume(self, kind: str, where: tuple[Path, str], first: int, per: int) -> tuple[int, float]:
        """Start the producers, let them go together, consume all they make: (events, seconds from the go)."""
        total = self.args.producers * per
        context = mp.get_context("fork")  # the parent holds no open connection while it forks
        go = context.Event()
        ready = context.Barrier(self.args.producers + 1)
        workers = [context.Process(target=produce, args=(kind, where, self.url, p, first, per, ready, go))
                   for p in range(self.args.producers)]
        for worker in workers:
            worker.start()
        consumer = self.open(kind, where)
        ready.wait(timeout=120)
        started = time.perf_counter()
        go.set()
        consumed = 0
        while consumed < total:
            got = consumer.step()
            consumed += got
            if got == 0:
                if any(w.exitcode not in (None, 0) for w in workers):
                    raise RuntimeError(f"{kind}: a producer failed")
                time.sleep(IDLE_POLL_S)
        seconds = time.perf_counter() - started
        for worker in workers:
            worker.join(timeout=60)
            if worker.exitcode != 0:
                raise RuntimeError(f"{kind}: a producer exited with {worker.exitcode}")
        consumer.close()
        return consumed, seconds

    # 6 ---------------------------------------------------------------------------------------------
    def group_commit(self) -> None:
        n, batch = self.args.group_events, self.args.group_batch
        line = Line("group", f"group-committed ingest: {batch} events a call ({n} events)", "events/s")
        subjects = self.fresh_all()
        [timings] = self.timed_rounds(
            n, subjects, lambda s, a, k: s.ingest_batches([f"g{i}" for i in range(a, a + k)], batch))
        for kind, subject in subjects.items():
            line.figures[kind] = timings.rate(kind)
            subject.close()
        line.notes[PG] = line.notes[SQLITE] = "ingest_many: one transaction a call"
        line.notes[PG] += " (one statement: inbox_ingest_set())"
        line.notes[PGQ] = "enqueue with lists: one INSERT ... SELECT FROM UNNEST a call"
        self.record(line)

    # 7 ---------------------------------------------------------------------------------------------
    def engine_pair(self) -> None:
        """Two real engines on one inbox (one holding the lease, one standing by and reading status as a
        console does) and a producer ingesting: the events per second the holder finishes."""
        n = self.args.pair_events
        line = Line("pair", f"two engines on one inbox, one holding the lease, + a producer ({n} events)",
                    "events/s")
        for kind in (PG, SQLITE):
            folder, schema = self.place()
            target = inbox_url(self.url, schema) if kind == PG else str(folder / "inbox.db")
            result = run_pair(target, n, batch=self.args.pair_batch, lease_ttl=self.args.pair_lease_ttl)
            result["system"] = kind
            self.pair.append(result)
            line.figures[kind] = result["done_per_s"]
            line.notes[kind] = (f"producer {result['ingested_per_s']:,.0f}/s in calls of {self.args.pair_batch}; "
                                f"standby: {result['standby_acquires']} acquires refused, "
                                f"{result['status_reads']} status reads")
        line.figures[PGQ] = None
        line.notes[PGQ] = "no lease: not measured"
        self.record(line)


def inbox_url(url: str, schema: str) -> str:
    """The URL of our inbox in its own schema of the server's database."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def open_subject(kind: str, where: tuple[Path, str], url: str, *, batch_cap: int, consumer: bool) -> Subject:
    folder, schema = where
    if kind == SQLITE:
        return StoreSubject(kind, CoreSubject(folder, consumer=consumer, batch_cap=batch_cap))
    if kind == PG:
        return StoreSubject(kind, PgCoreSubject(inbox_url(url, schema), consumer=consumer, batch_cap=batch_cap))
    if kind == PGQ:
        return PgqSubject(url, schema, batch=batch_cap, install=consumer)
    raise ValueError(f"unknown system {kind!r}")


def produce(kind: str, where: tuple[Path, str], url: str, index: int, first: int, count: int,
            ready: Any, go: Any) -> None:
    """One producer process: open the queue, wait for the start, ingest count events one by one."""
    subject = open_subject(kind, where, url, batch_cap=100, consumer=False)
    ready.wait(timeout=120)
    go.wait(timeout=120)
    if subject.ingest_each([f"p{index}-{i}" for i in range(first, first + count)]) != count:
        raise RuntimeError(f"{kind}: producer {index} saw its own new event refused")
    subject.close()


# --- two engines on one inbox ---------------------------------------------------------------------
class NullAgent:
    """Does nothing with its events: the figure is the inbox's and the engine's, not an agent's."""

    name = "null"

    def run(self, ctx: Any) -> None:
        return None


def run_engine(target: str, holder: str, lease_ttl: int, ready: Any, stop: Any, out: Any, *, reads: bool) -> None:
    """One engine process. The standby one also reads status every 100 ms, as a console's refresh does."""
    from console.assembly import build_engine
    from console.config import Settings
    from console.core.lease import LeaseMixin

    acquires = {"refused": 0}
    original = LeaseMixin.acquire

    def counting(self: Any, who: str, *, now: int) -> int | None:
        gen = original(self, who, now=now)
        if gen is None:
            acquires["refused"] += 1
        return gen

    LeaseMixin.acquire = counting  # type: ignore[method-assign]

    async def main() -> None:
        engine = build_engine(Settings(db=target, lease_ttl=lease_ttl), agent=NullAgent(), holder=holder,
                              install_defaults=False)
        await engine.start()
        status_reads = 0
        try:
            while not stop.is_set():
                if reads:
                    await engine.read(lambda store: (store.status(now=int(time.time())), store.events(limit=50)))
                    status_reads += 1
                if engine.mode == ("standby" if reads else "active"):
                    ready.set()
                await asyncio.sleep(0.1)
        finally:
            await engine.stop()
        out.put({"holder": holder, "mode": engine.mode, "acquires_refused": acquires["refused"],
                 "status_reads": status_reads})

    asyncio.run(main())


def run_pair(target: str, events: int, *, batch: int, lease_ttl: int) -> dict[str, Any]:
    context = mp.get_context("fork")  # forked while this process holds no connection and runs no thread
    out = context.Queue()
    stop = context.Event()
    first_active, second_ready = context.Event(), context.Event()
    Store.open(target).close()  # the inbox exists before either engine starts
    first = context.Process(target=run_engine, args=(target, "engine-a", lease_ttl, first_active, stop, out),
                            kwargs={"reads": False})
    first.start()
    if not first_active.wait(timeout=60):
        raise RuntimeError("the first engine never took the lease")
    second = context.Process(target=run_engine, args=(target, "engine-b", lease_ttl, second_ready, stop, out),
                             kwargs={"reads": True})
    second.start()
    store = Store.open(target)
    try:
        if not second_ready.wait(timeout=60):
            raise RuntimeError("the second engine never stood by")
        started = time.perf_counter()
        for at in range(0, events, batch):
            store.ingest_many([("bench", f"pair-{i}", payload(i)) for i in range(at, min(events, at + batch))],
                              now=int(time.time()))
        ingested = time.perf_counter() - started
        deadline = time.monotonic() + 600
        while store.counts().get("done", 0) < events:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {store.counts()} after 600 s")
            time.sleep(0.005)
        finished = time.perf_counter() - started
        counts = store.counts()
        lease = store.lease()
    finally:
        stop.set()
        reports = [out.get(timeout=60) for _ in range(2)]
        for process in (first, second):
            process.join(timeout=60)
        store.close()
    by_holder = {report["holder"]: report for report in reports}
    if lease is None or lease.holder != "engine-a" or lease.gen != 1:
        raise RuntimeError(f"the lease changed hands during the run: {lease}")
    if counts.get("dead", 0) or counts.get("pending", 0) or counts.get("running", 0):
        raise RuntimeError(f"not every event finished once: {counts}")
    return {"events": events, "ingest_seconds": ingested, "seconds": finished,
            "ingested_per_s": events / ingested, "done_per_s": events / finished,
            "standby_acquires": by_holder["engine-b"]["acquires_refused"],
            "status_reads": by_holder["engine-b"]["status_reads"], "lease_gen": lease.gen}


def drop_schemas(url: str, schemas: list[str]) -> None:
    """Leave an existing server (--url) as it was found: the inboxes and peer queues made here go."""
    with psycopg.connect(url, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# --- command line ---------------------------------------------------------------------------------
STEPS = ("ingest", "duplicates", "drain", "cycles", "producers", "group", "pair")

SIZES = {
    "ingest": (2000, 30, "events for single-transaction ingest"),
    "duplicates": (2000, 30, "refused duplicates to time"),
    "drain": (20000, 200, "events to drain"),
    "cycles": (700, 16, "one-at-a-time cycles per table size"),
    "table_rows": (100_000, 200, "finished rows in the large table"),
    "producers": (4, 2, "producer processes"),
    "per_producer": (1500, 15, "events per producer"),
    "group_events": (20000, 400, "events for group-committed ingest"),
    "group_batch": (100, 100, "events per group-committed call"),
    "pair_events": (10000, 300, "events the producer ingests while two engines share the inbox"),
    "pair_batch": (100, 100, "events per ingest_many call of that producer"),
    "pair_lease_ttl": (30, 30, "the engines' lease time in seconds"),
    "rounds": (7, 2, "interleaved rounds each line is split into"),
    "batch_cap": (100, 100, "claim batch cap (ours) and dequeue batch size (pgqueuer)"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--url", help="an existing PostgreSQL database to use (default: start a throwaway server)")
    parser.add_argument("--dir", type=Path, help="parent folder for the SQLite files (default: a temp dir)")
    add_sizes_and_outputs(parser, STEPS, SIZES)
    return parsed_with_sizes(parser, argv, SIZES)


def machine() -> dict[str, Any]:
    return common_machine(psycopg=psycopg.__version__, libpq=psycopg.pq.version(), pgqueuer=pgqueuer.__version__)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir is not None and not args.dir.is_dir():
        print(f"postgres_bench: --dir {args.dir} is not a folder", file=sys.stderr)
        return 2
    server = None
    if args.url is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from pg_server import PostgresMissing, start_server

        try:
            server = start_server(durable=True)
        except (PostgresMissing, RuntimeError) as exc:
            print(f"postgres_bench: {str(exc).splitlines()[0]} (or pass --url)", file=sys.stderr)
            return 2
        url = server.url
    else:
        url = args.url
        try:
            psycopg.connect(url, connect_timeout=10).close()
        except psycopg.Error as exc:
            print(f"postgres_bench: cannot reach --url: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
            return 2
    root = Path(tempfile.mkdtemp(prefix="postgres-bench-", dir=args.dir))
    info = machine()
    where = "a throwaway server started by this script" if server else "the server at --url"
    print(f"PostgreSQL benchmark, {info['date']}, {info['cpus']} CPUs, Python {info['python']}; {where}; "
          f"SQLite files in {root}")
    bench = Bench(url, root, args)
    steps = {"ingest": bench.durable_ingest, "duplicates": bench.refused_duplicates, "drain": bench.drain,
             "cycles": bench.cycles, "producers": bench.producers, "group": bench.group_commit,
             "pair": bench.engine_pair}
    started = time.perf_counter()
    try:
        run_steps(steps, args.only)
        if not bench.durability:
            bench.durability[PG] = bench.fresh(PG).durability()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()
        else:
            drop_schemas(url, bench.schemas)
    print("\ndurability as read back from the live connections:")
    print_durability(bench.durability, 20)
    elapsed = time.perf_counter() - started
    print(f"\nfinished in {elapsed:.1f} s")
    result = {
        "machine": info,
        "command": " ".join(["python", "bench/postgres_bench.py", *(argv if argv is not None else sys.argv[1:])]),
        "seconds": elapsed,
        "durability": bench.durability,
        "claim_plans": bench.claim_plans,
        "pair": bench.pair,
        "lines": [vars(line) for line in bench.lines],
    }
    write_results(args, result, markdown(bench.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
