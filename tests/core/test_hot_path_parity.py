"""The hot path's parity: each usual operation (ingest one, ingest a set, claim fresh, finish a run that staged
nothing) is run over the same scenarios on SQLite, on PostgreSQL with its one-round-trip functions (the backend's
try_* methods), and on PostgreSQL with them declining (so the Store's shared path does the work), and the rows each
leaves are compared: the inbox, the history, the counts and the refused finishes, with what each call answered.

A PL/pgSQL function that falls behind the shared statements (core/statements.py) fails here. The three stores share
the session's one PostgreSQL server (tests/conftest.py), each in a schema of its own."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from console.core import Store
from console.core.backend import MoveMark
from console.core.options import StoreOptions
from console.core.pg import PgBackend
from console.core.sqlite import SqliteBackend
from tests.pg_server import PostgresServer, drop_schema

NOW = 1_000
IngestedSet = tuple[list[bool], MoveMark | None] | None
HOLDER = "worker"


class DeclinesFastPaths:
    """A backend with its fast paths declined: every operation takes the Store's shared path (Backend.try_*: a
    backend may decline any of them, having written nothing)."""

    def try_ingest(self, source: str, source_id: str, encode: Callable[[], str],
                   now: int) -> tuple[bool, MoveMark | None] | None:
        return None

    def try_ingest_many(self, encoded: Sequence[tuple[str, str, str]], now: int, *,
                        traces: Mapping[tuple[str, str], str] | None = None) -> IngestedSet:
        return None

    def try_claim(self, holder: str, gen: int, now: int, cap: int) -> list[Any] | None:
        return None

    def try_finish(self, holder: str, gen: int, ids: Sequence[int], now: int) -> bool:
        return False


class SharedPathPgBackend(DeclinesFastPaths, PgBackend):
    """PostgreSQL on the Store's shared path."""


class SharedPathSqliteBackend(DeclinesFastPaths, SqliteBackend):
    """SQLite on the Store's shared path."""


class CountingSqliteBackend(SqliteBackend):
    """SQLite as it runs, counting the claims and finishes its fast paths did whole (as "sqlite claim", ...)."""

    taken: list[str]

    def try_claim(self, holder: str, gen: int, now: int, cap: int) -> list[Any] | None:
        done = super().try_claim(holder, gen, now, cap)
        if done is not None:
            self.taken.append("sqlite claim")
        return done

    def try_finish(self, holder: str, gen: int, ids: Sequence[int], now: int) -> bool:
        done = super().try_finish(holder, gen, ids, now)
        if done:
            self.taken.append("sqlite finish")
        return done


class CountingPgBackend(PgBackend):
    """PostgreSQL as it runs, counting the operations its fast paths did whole (so a scenario is known to have
    exercised them, not declined them all)."""

    taken: list[str]

    def try_ingest(self, source: str, source_id: str, encode: Callable[[], str],
                   now: int) -> tuple[bool, MoveMark | None] | None:
        return self._count("ingest", super().try_ingest(source, source_id, encode, now))

    def try_ingest_many(self, encoded: Sequence[tuple[str, str, str]], now: int, *,
                        traces: Mapping[tuple[str, str], str] | None = None) -> IngestedSet:
        return self._count("ingest_many", super().try_ingest_many(encoded, now, traces=traces))

    def try_claim(self, holder: str, gen: int, now: int, cap: int) -> list[Any] | None:
        return self._count("claim", super().try_claim(holder, gen, now, cap))

    def try_finish(self, holder: str, gen: int, ids: Sequence[int], now: int) -> bool:
        return bool(self._count("finish", super().try_finish(holder, gen, ids, now) or None))

    def _count(self, operation: str, done: Any) -> Any:
        if done is not None:
            self.taken.append(operation)
        return done


def _answer(call: Callable[[], Any]) -> Any:
    """What a call answered, events by key (ids differ between engines: a PostgreSQL sequence spends a value on a
    refused insert), or the error it raised."""
    try:
        result = call()
    except ValueError as exc:
        return f"ValueError: {exc}"
    if isinstance(result, list) and result and hasattr(result[0], "source_id"):
        return [(e.source, e.source_id, e.status, e.attempts, e.payload) for e in result]
    return result


def ingest_one(store: Store) -> list[Any]:
    return [
        _answer(lambda: store.ingest("web", "a", {"n": 1}, now=NOW)),
        _answer(lambda: store.ingest("web", "a", {"n": 2}, now=NOW + 1)),  # a copy, held in memory
        _answer(lambda: store.ingest("web", "b", {"n": 3}, now=NOW + 2)),  # written with the held copy
        _answer(lambda: store.ingest("web", "b", {1: "not a string key"}, now=NOW + 3)),  # bad, under a stored key
        _answer(lambda: store.ingest("web", "c", {1: "not a string key"}, now=NOW + 3)),  # bad, new
        _answer(lambda: store.ingest("mail", "c", "text", now=NOW + 4)),
        _answer(store.write_refusals),
    ]


def ingest_a_set(store: Store) -> list[Any]:
    return [
        _answer(lambda: store.ingest_many([("web", "a", 1), ("web", "b", 2)], now=NOW)),
        _answer(lambda: store.ingest_many([("web", "b", 3), ("web", "c", 4), ("mail", "a", 5)], now=NOW + 1)),
        _answer(lambda: store.ingest_many([("web", "d", 6), ("web", "d", 7), ("web", "a", 8)], now=NOW + 2)),
        _answer(lambda: store.ingest_many([("web", "e", 9), ("web", "f", {2: "bad"})], now=NOW + 3)),
    ]


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def deliver_a_group(store: Store) -> list[Any]:
    """The webhook receiver's group commit (Store.ingest_encoded_deliveries), with the traces senders sent."""
    return [
        _answer(lambda: store.ingest_deliveries([("web", "a", 1, None), ("web", "b", 2, None)], now=NOW,
                                                traces={("web", "a"): TRACE})),
        _answer(lambda: store.ingest_deliveries([("web", "a", 3, None), ("web", "c", 4, None)], now=NOW + 1,
                                                traces={("web", "a"): TRACE.replace("01", "00"), ("web", "c"): TRACE})),
        _answer(lambda: store.ingest_deliveries([("web", "d", 5, None), ("web", "d", 6, None)], now=NOW + 2)),
    ]


def claim_fresh(store: Store) -> list[Any]:
    store.ingest_many([("web", str(n), {"n": n}) for n in range(5)], now=NOW)
    gen = store.acquire(HOLDER, now=NOW)
    assert gen is not None
    answers = [
        _answer(lambda: store.claim_batch(HOLDER, gen, now=NOW + 1)),  # the cap: 3
        _answer(lambda: store.claim_batch(HOLDER, gen + 1, now=NOW + 2)),  # not the lease's generation
        _answer(lambda: store.claim_batch(HOLDER, gen, now=NOW + 3)),  # the other 2
        _answer(lambda: store.claim_batch(HOLDER, gen, now=NOW + 4)),  # nothing waits
    ]
    store.ingest("web", "late", {"n": 9}, now=NOW + 5)
    answers.append(_answer(lambda: store.claim_batch(HOLDER, gen, now=NOW + 500)))  # the lease lapsed: nothing
    return answers


def finish_staged_nothing(store: Store) -> list[Any]:
    store.ingest_many([("web", str(n), {"n": n}) for n in range(4)], now=NOW)
    gen = store.acquire(HOLDER, now=NOW)
    assert gen is not None
    ids = [event.id for event in store.claim_batch(HOLDER, gen, now=NOW + 1)]
    answers = [
        _answer(lambda: store.finish(HOLDER, gen, [ids[0], ids[1], ids[0]], now=NOW + 2)),  # one listed twice
        _answer(lambda: store.finish(HOLDER, gen, [ids[1]], now=NOW + 3)),  # done already: moves nothing
        _answer(lambda: store.finish(HOLDER, gen + 1, [ids[2]], now=NOW + 4)),  # a stale generation: refused
        _answer(lambda: store.finish(HOLDER, gen, [ids[2]], now=NOW + 500)),  # the lease lapsed: refused
    ]
    again = store.acquire(HOLDER, now=NOW + 600)  # a takeover: the lapsed run's event is lost and claimed again
    assert again is not None
    claimed = store.claim_batch(HOLDER, again, now=NOW + 601)
    answers.append(_answer(lambda: claimed))
    answers.append(_answer(lambda: store.finish(HOLDER, again, [event.id for event in claimed], now=NOW + 602)))
    return answers


SCENARIOS = {"ingest one": ingest_one, "ingest a set": ingest_a_set, "deliver a group": deliver_a_group,
             "claim fresh": claim_fresh,
             "finish a run that staged nothing": finish_staged_nothing}
# Which fast paths each scenario must see taken on PostgreSQL (else it would compare the shared path with itself).
TAKEN = {"ingest one": {"ingest"}, "ingest a set": {"ingest_many"}, "deliver a group": {"ingest_many"},
         "claim fresh": {"claim"},
         "finish a run that staged nothing": {"finish"}}


def rows(store: Store) -> dict[str, Any]:
    """The tables these operations write, events named by key, in each table's own order."""
    conn = store.connection
    keys = {int(i): (str(source), str(source_id)) for i, source, source_id in
            conn.execute("SELECT id, source, source_id FROM inbox")}
    inbox = sorted(
        (keys[int(row[0])], *row[1:])
        for row in conn.execute(
            """SELECT id, payload, status, attempts, claim_gen, error, created_at, updated_at, next_attempt_at,
                      duplicates, last_duplicate_at, pruned_at, dead_reason, trace, failed_with, claim_alone
                 FROM inbox""")
    )
    history = [(keys[int(row[0])], *row[1:]) for row in conn.execute(
        "SELECT event_id, at, kind, holder, gen, detail FROM attempts ORDER BY id")]
    refused = [(*row[:3], [keys[int(i)] for i in json.loads(row[3])], *row[4:]) for row in conn.execute(
        "SELECT at, holder, gen, event_ids, lease_holder, lease_gen, reason, kind, detail FROM refused_finishes "
        "ORDER BY id")]
    return {"inbox": inbox, "history": history, "counts": store.counts(), "refused": refused}


@pytest.fixture
def three_stores(db_path: Path, postgres_url: str,
                 postgres_server: PostgresServer) -> Iterator[tuple[list[Store], list[str]]]:
    """One scenario's stores (SQLite, PostgreSQL as it runs, PostgreSQL on its shared path, SQLite on its shared
    path), and the list of fast paths the second took."""
    options = StoreOptions().but(batch_cap=3, lease_ttl=120)
    counting = CountingPgBackend.open(postgres_url)
    counting.taken = []
    shared_url = postgres_server.inbox_url()
    shared_file = db_path.with_name("shared-path.db")
    sqlite = CountingSqliteBackend.open(db_path)
    sqlite.taken = counting.taken
    stores = [Store(sqlite, options, seed=7), Store(counting, options, seed=7),
              Store(SharedPathPgBackend.open(shared_url), options, seed=7),
              Store(SharedPathSqliteBackend.open(shared_file), options, seed=7)]
    yield stores, counting.taken
    for store in stores:
        store.close()
    drop_schema(postgres_server, shared_url)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_operation_leaves_the_same_rows_with_and_without_its_fast_path(
        scenario: str, three_stores: tuple[list[Store], list[str]]) -> None:
    stores, taken = three_stores
    results = [(SCENARIOS[scenario](store), rows(store)) for store in stores]
    assert TAKEN[scenario] <= set(taken), f"the fast path was never taken: {taken}"
    sqlite_taken = {f"sqlite {operation}" for operation in TAKEN[scenario] & {"claim", "finish"}}
    assert sqlite_taken <= set(taken), f"SQLite's fast path was never taken: {taken}"
    sqlite, fast, shared, sqlite_shared = results
    assert fast[0] == shared[0] == sqlite[0] == sqlite_shared[0], "the calls answered differently"
    for table in ("inbox", "history", "counts", "refused"):
        assert fast[1][table] == shared[1][table], f"{table}: PostgreSQL's fast path against its shared path"
        assert shared[1][table] == sqlite[1][table], f"{table}: PostgreSQL against SQLite"
        assert sqlite[1][table] == sqlite_shared[1][table], f"{table}: SQLite's fast path against its shared path"
