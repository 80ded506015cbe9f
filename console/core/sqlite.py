"""The Backend on a SQLite file (apsw): what the Store asks of the storage, the file's way.

Opening, pragmas, migrations and the write transaction itself are db.py's; this is the Backend protocol
over them (core/backend.py), including how a batch is written: one cheap statement a row, which on SQLite
(a function call, not a round trip) beats one statement for the whole set.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import apsw

from console.core.backend import AttemptEntry, MoveMark, QuickCheck
from console.core.db import (
    bounded_quick_check,
    connect,
    integrity_problems,
    schema_dump,
    shrink_wal,
    transaction,
    translate_errors,
    user_version,
    wal_path,
)
from console.core.statements import (
    CLAIM_APPLIES,
    CLAIM_ONE,
    COUNT_REFUSED,
    FINISH_APPLIES,
    FINISH_ONE,
    INSERT_EVENT,
    LOG_ATTEMPT,
    MOVE_MARK,
    SELECT_FRESH,
    payload_checksum,
)
from console.core.walfeed import WalFeed

# An ingest's one read (try_ingest): is the key stored, and does the inbox carry a move mark.
_STORED_OR_MARKED = """SELECT EXISTS (SELECT 1 FROM inbox WHERE source = ? AND source_id = ?),
                              EXISTS (SELECT 1 FROM move_mark)"""


class SqliteBackend:
    """One apsw connection to one inbox file."""

    name = "sqlite"

    def __init__(self, conn: apsw.Connection, path: str, busy_timeout: float | None = None) -> None:
        self._conn = conn
        self.path = path
        self._busy_timeout = busy_timeout  # seconds (the busy_timeout setting); None: the default

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, check: bool = False, read_only: bool = False, vfs: str | None = None,
        busy_timeout: float | None = None,
    ) -> SqliteBackend:
        return cls(connect(path, check=check, read_only=read_only, vfs=vfs, busy_timeout=busy_timeout),
                   os.fspath(path), busy_timeout)

    @property
    def conn(self) -> apsw.Connection:
        return self._conn

    def reopen(self) -> SqliteBackend:
        return SqliteBackend(connect(self.path, check=False, busy_timeout=self._busy_timeout), self.path,
                             self._busy_timeout)

    def close(self) -> None:
        self._conn.close()

    # --- writing ------------------------------------------------------------------------------
    def transaction(self, *, guarded: bool = True, relaxed: bool = False) -> AbstractContextManager[object]:
        return transaction(self._conn, guarded=guarded, relaxed=relaxed)

    def write_transaction(self, *, guarded: bool = True, relaxed: bool = False) -> AbstractContextManager[object]:
        return transaction(self._conn, guarded=guarded, relaxed=relaxed, translated=True)

    def storage_errors(self) -> Any:
        return translate_errors()

    # --- the change feed ----------------------------------------------------------------------
    def change_feed(self) -> WalFeed:
        """The kernel says when the file's WAL is written, PRAGMA data_version on a connection of its own whether
        a commit landed (console.core.walfeed)."""
        return WalFeed(self.reopen())

    def data_version(self) -> int:
        """Changes when another connection commits to the file (cheap; no disk read)."""
        return int(self._conn.execute("PRAGMA data_version").fetchall()[0][0])

    # --- facts about the storage --------------------------------------------------------------
    def move_mark(self) -> tuple[str, str, int] | None:
        try:
            rows = self._conn.execute(MOVE_MARK).fetchall()
        except apsw.SQLError:  # a file built to a schema before the mark (tests build them)
            return None
        return (str(rows[0][0]), str(rows[0][1]), int(rows[0][2])) if rows else None

    def schema(self) -> list[tuple[str, str, str]]:
        return schema_dump(self._conn)

    def schema_version(self) -> int:
        return user_version(self._conn)

    def integrity_check(self) -> str:
        return "; ".join(str(r[0]) for r in self._conn.execute("PRAGMA integrity_check"))

    def integrity_problems(self) -> list[str]:
        return integrity_problems(self._conn)

    def intake_check(self, *, seconds: float, probe_write: bool = True) -> QuickCheck:
        return bounded_quick_check(self._conn, seconds=seconds)

    def wal_bytes(self) -> int:
        try:
            return wal_path(self.path).stat().st_size
        except FileNotFoundError:
            return 0

    def shrink_wal(self) -> bool:
        return shrink_wal(self._conn)

    def page_count(self) -> int:
        return int(self._conn.execute("PRAGMA page_count").fetchall()[0][0])

    def limit_pages(self, pages: int) -> int:
        if pages < 1:
            raise ValueError(f"pages must be at least 1, not {pages}")
        return int(self._conn.execute(f"PRAGMA max_page_count = {int(pages)}").fetchall()[0][0])

    def query_plan(self, sql: str, params: Any = ()) -> list[str]:
        return [str(row[3]) for row in self._conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]

    def durability_settings(self) -> dict[str, str]:
        rows = {name: str(self._conn.execute(f"PRAGMA {name}").fetchall()[0][0])
                for name in ("journal_mode", "synchronous", "page_size")}
        return {"sqlite_version": apsw.sqlite_lib_version(), **rows}

    # --- the usual ingest, claim and finish (Backend.try_*) ------------------------------------------------------
    def try_ingest(
        self, source: str, source_id: str, encode: Callable[[], str], now: int
    ) -> tuple[bool, MoveMark | None] | None:
        # BEGIN (deferred) takes no lock; the read takes the snapshot, and the INSERT upgrades it to the write lock
        # only if no other connection has committed since (else SQLITE_BUSY_SNAPSHOT, at once; a writer holding the
        # lock: SQLITE_BUSY, at once too, the busy handler is not called for an upgrade). So what the read saw (no
        # such key, no move mark) still holds when the row is written, as if it had been read under the lock; and
        # the read and the write share one snapshot's locks, where a read and then BEGIN IMMEDIATE took two.
        conn = self._conn
        conn.execute("BEGIN")
        try:
            ((stored, marked),) = conn.execute(_STORED_OR_MARKED, (source, source_id)).fetchall()
            if stored:
                return False, None
            if marked:
                ((state, other, at),) = conn.execute(MOVE_MARK).fetchall()
                return False, (str(state), str(other), int(at))
            text = encode()
            try:
                ((duplicates,),) = conn.execute(INSERT_EVENT, (source, source_id, text, payload_checksum(text), now,
                                                                now, None)).fetchall()
            except apsw.BusyError:
                return None  # another writer came between the read and the write: nothing was written
            conn.execute("COMMIT")
            return duplicates == 0, None
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    # A statement is a function call here, not a round trip: the shared paths are the cheap ones for the rest.
    def try_ingest_many(
        self, encoded: Sequence[tuple[str, str, str]], now: int, *, traces: Mapping[tuple[str, str], str] | None = None
    ) -> tuple[list[bool], MoveMark | None] | None:
        return None

    # The usual claim and finish read what decides them in one statement (statements.CLAIM_APPLIES, FINISH_APPLIES)
    # where the shared path reads the move mark, the lease and three probes one statement each; both run under the
    # write lock of their own transaction, relaxed as the shared path's. When the read says no, the transaction
    # commits having written nothing and the call declines: the shared path runs, records and says why.
    def try_claim(self, holder: str, gen: int, now: int, cap: int) -> list[Any] | None:
        conn = self._conn
        with transaction(conn, guarded=False, relaxed=True, translated=True):
            ((applies,),) = conn.execute(CLAIM_APPLIES, (holder, gen, now, gen, now)).fetchall()
            if not applies:
                return None
            rows = self.claim_fresh(gen, now, cap)  # in id order, as the shared path logs them
            self.log_attempts([(row[0], now, "claim", holder, gen, f"attempt {row[5]}") for row in rows])
        return rows

    def try_finish(self, holder: str, gen: int, ids: Sequence[int], now: int) -> bool:
        conn = self._conn
        with transaction(conn, guarded=False, relaxed=True, translated=True):
            ((applies,),) = conn.execute(FINISH_APPLIES, (holder, gen, now)).fetchall()
            if not applies:
                return False
            done = self.finish_done(ids, gen, now)
            self.log_attempts([(event_id, now, "finish", holder, gen, None) for event_id in ids if event_id in done])
        return True

    # --- a batch: a statement a row (a statement is a function call here, not a round trip) ----------
    def insert_events(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        return [self._insert_event(source, source_id, text, now) for source, source_id, text in encoded]

    def _insert_event(self, source: str, source_id: str, text: str, now: int) -> bool:
        # Read to its end, not returned from inside the loop: the statement must be finished before COMMIT,
        # whoever else still holds its cursor (tests/core/test_cursor_lifetime.py).
        ((duplicates,),) = self._conn.execute(INSERT_EVENT, (source, source_id, text, payload_checksum(text), now, now,
                                                             None))
        return bool(duplicates == 0)

    def claim_fresh(self, gen: int, now: int, cap: int) -> list[Any]:
        # Fresh events are picked from their partial index, then claimed one UPDATE by primary key each: on
        # SQLite 3.54 that is 4-6x cheaper than one UPDATE ... WHERE id IN (subquery) for the usual small batch.
        fresh = [row[0] for row in self._conn.execute(SELECT_FRESH, (cap,))]
        return [row for event_id in fresh for row in self._conn.execute(CLAIM_ONE, (gen, now, event_id))]

    def finish_done(self, ids: Sequence[int], gen: int, now: int) -> set[int]:
        moved: set[int] = set()
        for event_id in ids:
            moved.update(row[0] for row in self._conn.execute(FINISH_ONE, (now, event_id, gen)))
        return moved

    def log_attempts(self, entries: Sequence[AttemptEntry]) -> None:
        for entry in entries:
            self._conn.execute(LOG_ATTEMPT, entry)

    def count_refusals(self, held: Sequence[tuple[str, str, int, int]]) -> None:
        self._conn.executemany(COUNT_REFUSED, [(copies, last, source, source_id)
                                               for source, source_id, copies, last in held])

    def claim_fresh_statement(self) -> tuple[str, tuple[int, ...]]:
        return SELECT_FRESH, (1,)

    # --- moving a whole inbox (copy.py) ---------------------------------------------------------
    @property
    def location(self) -> str:
        return os.fspath(Path(self.path).expanduser().absolute())

    def tables(self) -> set[str]:
        rows = self._conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%'")
        return {str(row[0]) for row in rows}

    def columns(self, table: str) -> list[str]:
        return [str(row[1]) for row in self._conn.execute(f"PRAGMA table_info({table})")]

    def begin_snapshot(self) -> None:
        self._conn.execute("BEGIN")

    def lift_idle_limit(self) -> None:
        pass  # a file's transaction may sit idle as long as its process holds it

    def bulk_insert(self, table: str, columns: Sequence[str], chunks: Iterable[list[tuple[Any, ...]]]) -> int:
        insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
        moved = 0
        for chunk in chunks:
            self._conn.executemany(insert, chunk)
            moved += len(chunk)
        return moved

    def pause_counting(self, counted: Mapping[str, str]) -> None:
        pass  # SQLite's counting triggers cost a row's update each, as an ingest does: they count the copy

    def recount(self, counted: Mapping[str, str]) -> None:
        pass

    def advance_identities(self, tables: Sequence[str]) -> None:
        pass  # SQLite's next id follows the highest stored
