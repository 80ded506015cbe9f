"""The Store on PostgreSQL: the same mixins and SQL as on SQLite, over a PgConnection.

Only what is about the storage itself differs here (the schema's version, the size on disk, the
integrity check, change notification), plus how a batch is claimed and finished: one statement for the
whole set, where SQLite runs one cheap statement a row (each statement here is a round trip, a parse and a
plan). Every behaviour (lease, fencing, claims, timers, approvals, outbox, journal) is the shared code,
run by the same conformance tests on both backends.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg

from console.core import pg
from console.core.base import COUNT_A_COPY, AttemptEntry
from console.core.db import QuickCheck, StoreError, newer_schema, transaction, translate_errors
from console.core.inbox import _CLAIM_SET, _EVENT_COLUMNS, _SELECT_FRESH
from console.core.options import StoreOptions
from console.core.store import Store


class PgStore(Store):
    _conn: pg.PgConnection

    def __init__(self, conn: pg.PgConnection, path: str, options: StoreOptions, seed: int | None = None) -> None:
        super().__init__(conn, path, options, seed)
        self.target = conn.target
        self._read_only = conn.read_only

    @classmethod
    def open_url(
        cls, url: str, options: StoreOptions, seed: int | None = None, *, read_only: bool = False,
        schema: str | None = None, password_env: str | None = None,
    ) -> PgStore:
        target = pg.parse_target(url, schema=schema, password_env=password_env)
        return cls(pg.connect(target, read_only=read_only), target.display, options, seed)

    def reopen(self) -> PgStore:
        return type(self)(pg.PgConnection(self.target, read_only=self._read_only), self.path, self.options,
                          self._seed)

    @property
    def backend(self) -> str:
        return "postgresql"

    def change_feed(self) -> pg.ChangeFeed:
        """A LISTEN on this inbox's channel: every write transaction that wrote NOTIFYs it as it commits."""
        return pg.ChangeFeed(self.target)

    DURABILITY_SETTINGS = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")

    def durability_settings(self) -> dict[str, str]:
        """The server's settings that decide what an acknowledged commit survives, as this connection sees
        them (benchmarks print them; `relaxed` commits still turn synchronous_commit off for themselves)."""
        rows = self._conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(?)", (list(self.DURABILITY_SETTINGS),)
        ).fetchall()
        found = {str(name): str(value) for name, value in rows}
        return {name: found.get(name, "?") for name in self.DURABILITY_SETTINGS}

    # --- a batch in one statement (see InboxMixin._claim_fresh: the defaults write a row a statement) ----
    # Writers hold the inbox's advisory lock for the whole transaction, so the set read by a subquery cannot
    # change before the UPDATE takes it: no FOR UPDATE / SKIP LOCKED needed (one worker per inbox).
    def _claim_fresh(self, gen: int, now: int) -> list[Any]:
        return self._conn.execute(_CLAIM_FRESH_SET, (gen, now, self.options.batch_cap)).fetchall()

    def _finish_done(self, ids: Sequence[int], gen: int, now: int) -> set[int]:
        if not ids:
            return set()
        rows = self._conn.execute(_FINISH_SET, (now, list(ids), gen)).fetchall()
        return {int(row[0]) for row in rows}

    def _log_attempts(self, entries: Sequence[AttemptEntry]) -> None:
        if len(entries) < 2:
            super()._log_attempts(entries)
            return
        columns = [list(column) for column in zip(*entries, strict=True)]
        # WITH ORDINALITY keeps the entries' order in the ids the rows get (history reads by id).
        self._conn.execute(_LOG_ATTEMPTS_SET, columns)

    def _insert_events(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        # One INSERT cannot meet the same key twice (ON CONFLICT DO UPDATE refuses to touch a row it wrote),
        # so a key repeated within the call goes in a later wave: first copies, then second copies, ... As
        # one by one, the first copy is new (if not stored before) and each later one counts as a duplicate.
        waves: list[list[int]] = []
        seen: dict[tuple[str, str], int] = {}
        for index, (source, source_id, _) in enumerate(encoded):
            wave = seen.get((source, source_id), -1) + 1
            seen[(source, source_id)] = wave
            if wave == len(waves):
                waves.append([])
            waves[wave].append(index)
        new = [False] * len(encoded)
        for wave_indexes in waves:
            if len(wave_indexes) == 1:
                index = wave_indexes[0]
                new[index] = self._insert_event(*encoded[index], now)
                continue
            columns = [[encoded[index][part] for index in wave_indexes] for part in range(3)]
            rows = self._conn.execute(_INSERT_SET, (now, now, *columns)).fetchall()
            stored = {(str(source), str(source_id)): duplicates == 0 for source, source_id, duplicates in rows}
            for index in wave_indexes:
                new[index] = stored[encoded[index][0], encoded[index][1]]
        return new

    def _claim_statements(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        statements = super()._claim_statements()
        statements["claim_fresh"] = (_CLAIM_FRESH_SET, (1, 0, 1))
        return statements

    def data_version(self) -> int:
        """Changes when a transaction that writes starts or ends anywhere on the server (it may be another
        inbox's: a spare change, never a missed one). The snapshot's text (xmin:xmax:in-progress ids)
        changes when any writing transaction commits, which its xmax alone does not (a transaction holds
        its id from its first write). Waiters use change_feed(), which hears this inbox only."""
        return int(self._scalar("SELECT hashtext(pg_current_snapshot()::text)"))

    def query_plan(self, sql: str, params: Any = ()) -> list[str]:
        """PostgreSQL's plan for a statement (EXPLAIN without running it), one line per node."""
        return [str(row[0]).strip() for row in self._conn.execute(f"EXPLAIN (COSTS OFF) {sql}", params)]

    def limit_pages(self, pages: int) -> int:
        raise StoreError("a page cap is a SQLite file's setting: a PostgreSQL inbox has none")

    def schema(self) -> list[tuple[str, str, str]]:
        rows = self._conn.execute(
            """SELECT 'table', table_name, string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)
                 FROM information_schema.columns WHERE table_schema = current_schema() GROUP BY table_name
               UNION ALL
               SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()
               ORDER BY 1, 2"""
        ).fetchall()
        return [(str(kind), str(name), " ".join(str(sql).split())) for kind, name, sql in rows]

    def schema_version(self) -> int:
        return pg.schema_version(self._conn)

    def integrity_problems(self) -> list[str]:
        """PostgreSQL checks its own pages (checksums, WAL); what is checked here is the inbox's own
        bookkeeping: the kept counts agree with the rows they count."""
        problems = []
        for table, counts in (("inbox", "inbox_counts"), ("outbox", "outbox_counts")):
            rows = self._conn.execute(
                f"""SELECT c.status, c.n, (SELECT COUNT(*) FROM {table} t WHERE t.status = c.status)
                      FROM {counts} c ORDER BY c.status"""
            ).fetchall()
            problems += [f"{counts}: {status} says {kept}, {table} holds {real}"
                         for status, kept, real in rows if kept != real]
        return problems

    def intake_check(self, *, seconds: float, probe_write: bool = True) -> QuickCheck:
        """The check before intake on PostgreSQL (which checks its own pages): the schema is this version's,
        and (with probe_write, on a store not opened read-only) a write commits: a read-only standby, a full
        disk, a role without the right to write all refuse it here, before anything is acknowledged. `seconds`
        is SQLite's bound; these two statements take what a round trip takes."""
        started = time.monotonic()
        current = self.schema_version()
        if current != pg.SCHEMA_VERSION:
            if current > pg.SCHEMA_VERSION:
                raise newer_schema(self.path, current, pg.SCHEMA_VERSION)
            raise StoreError(f"inbox {self.path} has schema version {current}, not this agent-console's "
                             f"({pg.SCHEMA_VERSION}): open it once with `agent-console run` to upgrade it")
        if probe_write and not self._read_only:
            try:
                with translate_errors(), transaction(self._conn):
                    self._conn.execute("UPDATE schema_version SET version = version WHERE one = 1")
            except psycopg.Error as exc:  # a role that may not write, say: what the server said, in one line
                said = (str(exc).strip() or type(exc).__name__).splitlines()[0]
                raise StoreError(f"inbox {self.path} cannot take a write: {said}") from None
        return QuickCheck([], True, time.monotonic() - started)

    def integrity_check(self) -> str:
        return "; ".join(self.integrity_problems()) or "ok"

    def wal_bytes(self) -> int:
        return 0  # the server keeps and recycles its own WAL

    def shrink_wal(self) -> bool:
        return True

    def page_count(self) -> int:
        """Pages (8 KiB) the inbox's tables and indexes take on the server."""
        size = self._scalar(
            """SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relkind = 'r'"""
        )
        return int(size) // 8192


_CLAIM_FRESH_SET = f"{_CLAIM_SET} WHERE id IN ({_SELECT_FRESH}) RETURNING {_EVENT_COLUMNS}"
_FINISH_SET = """UPDATE inbox SET status = 'done', error = NULL, updated_at = ?
                  WHERE id = ANY(?) AND status = 'running' AND claim_gen = ? RETURNING id"""
_LOG_ATTEMPTS_SET = """INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
    SELECT event_id, at, kind, holder, gen, detail
      FROM unnest(?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::bigint[], ?::text[])
           WITH ORDINALITY AS entry(event_id, at, kind, holder, gen, detail, n)
     ORDER BY n"""
# Rows are inserted in the call's order (WITH ORDINALITY), so ids ascend as they would one by one.
_INSERT_SET = f"""INSERT INTO inbox (source, source_id, payload, created_at, updated_at)
    SELECT source, source_id, payload, ?, ? FROM unnest(?::text[], ?::text[], ?::text[])
           WITH ORDINALITY AS entry(source, source_id, payload, n)
     ORDER BY n
    {COUNT_A_COPY}
    RETURNING source, source_id, duplicates"""
