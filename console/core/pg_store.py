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
from dataclasses import fields
from typing import Any

import psycopg

from console.core import pg
from console.core.base import COUNT_A_COPY, AttemptEntry
from console.core.db import (
    MOVE_MARK,
    QuickCheck,
    StoreError,
    move_refusal,
    newer_schema,
    transaction,
    translate_errors,
)
from console.core.inbox import _CLAIM_SET, _EVENT_COLUMNS, _IS_STORED, _SELECT_FRESH, _event
from console.core.models import Event, RunOutcome
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

    # The usual claim and finish in one round trip each (the shared path's are eight and five): one statement does
    # the shared path's fenced work for the common case (the lease held, no move mark, no lost, retried or
    # hand-retried event to see to first; a finish that succeeded and stages nothing) and writes nothing otherwise,
    # saying so, and the shared path then runs as before.
    def _claim(self, holder: str, gen: int, now: int) -> list[Event]:
        if self._refused:  # held copies to write: the shared path's transaction writes them
            return super()._claim(holder, gen, now)
        rows = self._conn.write_at_once(_CLAIM_AT_ONCE.format(channel=self.target.channel), {
            "holder": holder, "gen": gen, "now": now, "cap": self.options.batch_cap}, relaxed=True)
        if not rows[0][0]:
            return super()._claim(holder, gen, now)
        return sorted((_event(row[2:]) for row in rows if row[2] is not None), key=lambda event: event.id)

    def _finish(
        self, holder: str, gen: int, ids: Sequence[int], outcome: RunOutcome, now: int, error: str | None,
        blame: int | None,
    ) -> bool:
        staged = any(getattr(outcome, part.name) for part in fields(outcome))
        if error is not None or staged or not ids or self._refused:
            return super()._finish(holder, gen, ids, outcome, now, error, blame)
        rows = self._conn.write_at_once(_FINISH_AT_ONCE.format(channel=self.target.channel), {
            "holder": holder, "gen": gen, "now": now, "ids": list(dict.fromkeys(ids))}, relaxed=True)
        if not rows[0][0]:  # not the lease holder (recorded as refused), or a move mark: the shared path says so
            return super()._finish(holder, gen, ids, outcome, now, error, blame)
        return True

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

    def _ingest_one(self, source: str, source_id: str, payload: Any, now: int) -> bool:
        # One round trip, new event or copy (the shared path's read first and its transaction are four): the INSERT
        # refuses a stored key itself (DO NOTHING: the copy is held in memory, as after the shared path's read).
        if self._refused:  # copies held to write: the shared path (a read; a new event's transaction writes them)
            return super()._ingest_one(source, source_id, payload, now)
        try:
            text = self.encode_payload(payload)
        except ValueError:  # a bad payload under a stored key is a copy, as on SQLite, which never reads it
            if self._scalar(_IS_STORED, (source, source_id)):
                self._hold_refusal(source, source_id, now)
                return False
            raise
        rows = self._conn.write_at_once(_INGEST_AT_ONCE.format(channel=self.target.channel),
                                        (source, source_id, text, now, now))
        stored, mark = rows[0][0], rows[0][2:]
        if stored:
            return True
        if mark[0] is not None:
            raise move_refusal(*mark)
        self._hold_refusal(source, source_id, now)
        return False

    def _ingest_encoded(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        # One round trip when every key is the call's only one of it and no refused copies are held to write (the
        # shared path otherwise: a repeated key goes in a later statement, see _insert_events).
        if self._refused or len({(source, source_id) for source, source_id, _ in encoded}) < len(encoded):
            return super()._ingest_encoded(encoded, now)
        columns = [[entry[part] for entry in encoded] for part in range(3)]
        rows = self._conn.write_at_once(_INSERT_SET_AT_ONCE.format(channel=self.target.channel), {
            "now": now, "sources": columns[0], "source_ids": columns[1], "payloads": columns[2]})
        mark = rows[0][1:4]
        if mark[0] is not None:
            raise move_refusal(*mark)
        stored = {(str(row[4]), str(row[5])): row[6] == 0 for row in rows if row[4] is not None}
        return [stored[source, source_id] for source, source_id, _ in encoded]

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
# ingest in one statement, run after the writers' lock (PgConnection.write_at_once): nothing is written when the inbox
# carries a move mark (read in this statement's snapshot, taken once the lock is held), a stored key is refused by
# the INSERT itself, and only a stored event NOTIFYs. Answers (stored, notified, the mark's state, other, at or NULLs).
_INGEST_AT_ONCE = f"""WITH mark AS ({MOVE_MARK}),
     new AS (INSERT INTO inbox (source, source_id, payload, created_at, updated_at)
             SELECT %s::text, %s::text, %s::text, %s::bigint, %s::bigint WHERE NOT EXISTS (SELECT 1 FROM mark)
             ON CONFLICT (source, source_id) DO NOTHING RETURNING id),
     told AS (SELECT pg_notify('{{channel}}', '') FROM new)
SELECT (SELECT count(*) FROM new), (SELECT count(*) FROM told), mark.state, mark.other, mark.at
  FROM (VALUES (1)) AS one LEFT JOIN mark ON true"""
# The shared claim's SET, with the parameters named.
_CLAIM_SET_NAMED = _CLAIM_SET.replace("claim_gen = ?", "claim_gen = %(gen)s").replace("updated_at = ?",
                                                                                    "updated_at = %(now)s")
assert "?" not in _CLAIM_SET_NAMED, _CLAIM_SET_NAMED
# The claim in one statement when nothing but fresh events waits: the shared path's probes (a lost run, a due or a
# hand retry) and the lease's fence are conditions of the UPDATE; answers (whether it applied, NOTIFYs, the claimed
# rows). When it did not apply it wrote nothing.
_CLAIM_AT_ONCE = f"""WITH mark AS ({MOVE_MARK}),
     go AS (SELECT 1 FROM lease WHERE one = 1 AND holder = %(holder)s AND gen = %(gen)s AND until >= %(now)s
               AND NOT EXISTS (SELECT 1 FROM mark)
               AND NOT EXISTS (SELECT 1 FROM inbox WHERE status = 'running' AND claim_gen < %(gen)s)
               AND NOT EXISTS (SELECT 1 FROM inbox WHERE status = 'pending' AND attempts > 0
                                                     AND next_attempt_at <= %(now)s)
               AND NOT EXISTS (SELECT 1 FROM inbox WHERE status = 'pending' AND claim_alone = 1)),
     claimed AS ({_CLAIM_SET_NAMED}
                  WHERE id IN (SELECT id FROM inbox WHERE status = 'pending' AND attempts = 0 AND claim_alone = 0
                                ORDER BY id LIMIT %(cap)s)
                    AND EXISTS (SELECT 1 FROM go)
                  RETURNING {_EVENT_COLUMNS}),
     logged AS (INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
                SELECT id, %(now)s, 'claim', %(holder)s, %(gen)s, 'attempt ' || attempts FROM claimed ORDER BY id),
     told AS (SELECT pg_notify('{{channel}}', '') WHERE EXISTS (SELECT 1 FROM claimed))
SELECT (SELECT count(*) FROM go), (SELECT count(*) FROM told), claimed.*
  FROM (VALUES (1)) AS one LEFT JOIN claimed ON true"""
# The finish of a run that succeeded and staged nothing, in one statement: fenced by the lease in its condition;
# answers (whether it applied, events moved, NOTIFYs). History lines in the order of the ids given, as one by one.
_FINISH_AT_ONCE = f"""WITH mark AS ({MOVE_MARK}),
     go AS (SELECT 1 FROM lease WHERE one = 1 AND holder = %(holder)s AND gen = %(gen)s AND until >= %(now)s
               AND NOT EXISTS (SELECT 1 FROM mark)),
     done AS (UPDATE inbox SET status = 'done', error = NULL, updated_at = %(now)s
               WHERE id = ANY(%(ids)s::bigint[]) AND status = 'running' AND claim_gen = %(gen)s
                 AND EXISTS (SELECT 1 FROM go)
               RETURNING id),
     logged AS (INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
                SELECT done.id, %(now)s, 'finish', %(holder)s, %(gen)s, NULL
                  FROM done JOIN unnest(%(ids)s::bigint[]) WITH ORDINALITY AS given(id, n) ON given.id = done.id
                 ORDER BY given.n),
     told AS (SELECT pg_notify('{{channel}}', '') WHERE EXISTS (SELECT 1 FROM done))
SELECT (SELECT count(*) FROM go), (SELECT count(*) FROM done), (SELECT count(*) FROM told)"""
# ingest_many in one statement (keys each once in the call): as _INSERT_SET, after the writers' lock, writing
# nothing when the inbox carries a move mark; answers (NOTIFYs, the mark's state, other, at or NULLs, then each
# row's source, source_id, duplicates).
_INSERT_SET_AT_ONCE = f"""WITH mark AS ({MOVE_MARK}),
     new AS (INSERT INTO inbox (source, source_id, payload, created_at, updated_at)
             SELECT source, source_id, payload, %(now)s::bigint, %(now)s::bigint
               FROM unnest(%(sources)s::text[], %(source_ids)s::text[], %(payloads)s::text[])
                    WITH ORDINALITY AS entry(source, source_id, payload, n)
              WHERE NOT EXISTS (SELECT 1 FROM mark)
              ORDER BY n
             {COUNT_A_COPY}
             RETURNING source, source_id, duplicates),
     told AS (SELECT pg_notify('{{channel}}', '') WHERE EXISTS (SELECT 1 FROM new))
SELECT (SELECT count(*) FROM told), mark.state, mark.other, mark.at, new.source, new.source_id, new.duplicates
  FROM (VALUES (1)) AS one LEFT JOIN mark ON true LEFT JOIN new ON true"""
