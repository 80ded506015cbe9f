"""The one place that opens PostgreSQL: the URL, the connection, write transactions, migrations, wake-ups.

The core's SQL is written once, for SQLite, in the portable subset both engines share; PgConnection runs
it on PostgreSQL with the few spellings that differ rewritten (placeholders, SQLite's INDEXED BY hint,
its `IS NOT` for two values). Parameters are bound on the client (psycopg's ClientCursor), as SQLite
binds them: an untyped NULL or a string then takes its type from where it stands, the way SQLite's
dynamic typing lets the same statement through.

Writers are serialised per inbox exactly as SQLite serialises them (BEGIN IMMEDIATE): every write
transaction first takes a transaction-scoped advisory lock keyed by the inbox's schema. The invariants
the core was proved with (the lease read and the write it fences in one transaction, nobody committing
in between) therefore hold unchanged; readers never wait (MVCC), and other inboxes in the same database
are not held up. One inbox is one person's agent: its write rate is far below what one lock passes.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import TransactionStatus

from console.core.db import (
    MOVE_MARK,
    StoreError,
    StoreUnavailable,
    is_postgres,
    move_refusal,
    newer_schema,
    numbered_migrations,
    older_schema_to_read,
)
from console.core.pg_target import DEFAULT_SCHEMA, PgTarget, parse_target

__all__ = ["DEFAULT_SCHEMA", "ChangeFeed", "PgConnection", "PgTarget", "connect", "is_postgres", "parse_target"]
CONNECT_TIMEOUT = 10  # seconds; a server that is down is one clear line, not a hang
IDLE_IN_WRITE_MS = 5_000
LOCK_WAIT_MS = 10_000  # longer than IDLE_IN_WRITE_MS: a waiter outlasts a frozen holder's transaction


# psycopg logs a warning of its own when a COPY is cut off by a lost connection; with no logging set up (the CLI's
# short commands) Python would print it to stderr beside the one line that says what happened.
logging.getLogger("psycopg").addHandler(logging.NullHandler())


def migrations() -> list[tuple[int, str, str]]:
    """The PostgreSQL schema's own numbered migrations (console/core/pg_schema), in order."""
    return numbered_migrations("pg_schema")


SCHEMA_VERSION = len(migrations())

_INDEXED_BY = re.compile(r"\s+INDEXED\s+BY\s+\w+", re.IGNORECASE)
# SQLite's `a IS NOT b` between two values is PostgreSQL's IS DISTINCT FROM (`IS NOT NULL` is the same in both).
_IS_NOT_VALUE = re.compile(r"\bIS\s+NOT\s+(?!NULL\b|DISTINCT\b|TRUE\b|FALSE\b)", re.IGNORECASE)
_translated: dict[str, str] = {}


def translate(sql: str) -> str:
    """The core's SQLite spelling of a statement, as PostgreSQL takes it (cached per statement text)."""
    done = _translated.get(sql)
    if done is not None:
        return done
    text = _IS_NOT_VALUE.sub("IS DISTINCT FROM ", _INDEXED_BY.sub("", sql))
    out: list[str] = []
    quoted = False
    for char in text:
        if char == "'":
            quoted = not quoted
        if char == "%":
            out.append("%%")
        elif char == "?" and not quoted:
            out.append("%s")
        else:
            out.append(char)
    done = "".join(out)
    if len(_translated) < 4096:
        _translated[sql] = done
    return done


class _Rows:
    """A statement's result, read at once (the core's queries are bounded): iterable like apsw's cursor."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


class _NumericAsNumber(Loader):
    """SUM() over integers is numeric in PostgreSQL: give back an int (a float when it has a fraction),
    as SQLite does, so no Decimal leaks into JSON or arithmetic."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


class _BoolAsInteger(Dumper):
    """The schema keeps flags as integers 0/1 (as SQLite does): a Python bool is written as one."""

    oid = 20  # int8

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"

    def quote(self, obj: Any) -> bytes:
        return self.dump(obj)


_WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)
_READS = re.compile(r"^\s*(SELECT|EXPLAIN|SHOW)\b", re.IGNORECASE)


class PgConnection:
    """What the core's mixins use of an apsw connection (execute, executemany, changes, in_transaction),
    on one psycopg connection in autocommit mode, with transactions begun explicitly."""

    def __init__(self, target: PgTarget, *, read_only: bool = False) -> None:
        self.target = target
        self.read_only = read_only
        self._relaxed = 0
        self._changes = 0
        self._wrote = False  # the open write transaction ran a statement that may change rows
        self.commits = 0  # write transactions committed on this connection (tests count them)
        self.statements = 0  # the core's statements run on this connection (tests and benchmarks count them)
        self._raw = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        extra: dict[str, Any] = {}
        if self.target.password_env:
            password = os.environ.get(self.target.password_env)
            if password is None:
                raise StoreError(f"the password variable {self.target.password_env} is not set "
                                 f"(inbox {self.target.display})")
            extra["password"] = password
        # A process frozen inside a write transaction (a closed laptop lid, SIGSTOP) would hold the writers'
        # lock for as long as it stays frozen, and every engine, console and receiver on the inbox with it.
        # The server ends such a transaction once it has sat idle IDLE_IN_WRITE_MS (ours never wait on
        # anything but the database), and a writer waits for the lock at most LOCK_WAIT_MS before it gives
        # up as on a busy SQLite file (StoreUnavailable: tried again later).
        options = (f"-c search_path={self.target.schema} -c idle_in_transaction_session_timeout={IDLE_IN_WRITE_MS}"
                   f" -c lock_timeout={LOCK_WAIT_MS}")
        if self.read_only:
            options += " -c default_transaction_read_only=on"
        try:
            raw = psycopg.connect(self.target.conninfo, autocommit=True, cursor_factory=psycopg.ClientCursor,
                                  connect_timeout=CONNECT_TIMEOUT, options=options, application_name="agent-console",
                                  **extra)
        except psycopg.Error as exc:
            where = self.target.display
            raise StoreUnavailable(f"cannot reach the inbox database {where}: {_first_line(exc)}") from None
        raw.adapters.register_loader("numeric", _NumericAsNumber)
        raw.adapters.register_dumper(bool, _BoolAsInteger)
        return raw

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The psycopg connection itself (migrations, LISTEN, tests)."""
        return self._raw

    def _usable(self) -> psycopg.Connection[Any]:
        """The connection, made again when the server dropped it (a restart, a failover) and no transaction
        was open on it: the next statement then goes to the server that is there now."""
        if self._raw.broken or self._raw.closed:
            self._raw = self._connect()
        return self._raw

    @property
    def in_transaction(self) -> bool:
        return self._raw.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> _Rows:
        if not self.in_transaction and _WRITES.match(sql):
            # A lone write outside a transaction still goes through the writers' lock, as in SQLite.
            with self.write_transaction():
                return self._run(sql, params)
        return self._run(sql, params)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> None:
        self._wrote = True
        self.statements += 1
        with self._usable().cursor() as cursor:
            cursor.executemany(translate(sql), list(seq))
            self._changes = cursor.rowcount

    def _run(self, sql: str, params: Sequence[Any] | None) -> _Rows:
        if not _READS.match(sql):
            self._wrote = True
        self.statements += 1
        with self._usable().cursor() as cursor:
            cursor.execute(translate(sql), tuple(params) if params is not None else ())
            self._changes = cursor.rowcount
            return _Rows(cursor.fetchall() if cursor.description is not None else [])

    def changes(self) -> int:
        """Rows the last statement changed (apsw's changes())."""
        return max(0, self._changes)

    @contextmanager
    def relaxed(self) -> Iterator[None]:
        """Commits inside skip the wait for the server's WAL flush (synchronous_commit off): the same
        promise as SQLite's synchronous=NORMAL, for the same commits."""
        self._relaxed += 1
        try:
            yield
        finally:
            self._relaxed -= 1

    @contextmanager
    def write_transaction(self, *, guarded: bool = True) -> Iterator[PgConnection]:
        """guarded: read the move mark once the lock is held, and raise its MoveRefusal (db.transaction)."""
        raw = self._usable()
        # The opening and the closing statements each go in one round trip (a simple query of several
        # statements; the key and the channel are an integer and a hex name, safe to write inline): three
        # round trips fewer on every write transaction.
        opening = f"BEGIN; SELECT pg_advisory_xact_lock({int(self.target.lock_key)})"
        if self._relaxed:
            opening += "; SET LOCAL synchronous_commit TO OFF"
        if guarded:
            # Its own statement after the lock's, so its snapshot is taken once the lock is held: it sees a
            # mark committed while this transaction waited for the lock.
            opening += f"; {MOVE_MARK}"
        try:
            cursor = raw.execute(opening.encode())
            self._wrote = False
            mark = _last_result(cursor) if guarded else []
        except psycopg.OperationalError as exc:
            self._abandon(raw)
            raise StoreUnavailable(f"the inbox database cannot be written: {_first_line(exc)}") from None
        if mark:
            self._abandon(raw)
            raise move_refusal(*mark[0])
        try:
            yield self
        except BaseException:
            self._abandon(raw)
            raise
        try:
            # Only a transaction that wrote is announced, as SQLite's data version moves only then. A standby
            # engine tries the lease whenever it is woken: were its refused acquire (it writes nothing)
            # announced too, it would wake itself at once, in a loop, taking the writers' lock each time.
            closing = "COMMIT"
            if self._wrote:
                closing = f"SELECT pg_notify('{self.target.channel}', ''); COMMIT"
            raw.execute(closing.encode())
            self.commits += 1
        except psycopg.Error:
            self._abandon(raw)
            raise

    def write_at_once(
        self, statement: str, params: Sequence[Any] | Mapping[str, Any], *, relaxed: bool = False
    ) -> list[tuple[Any, ...]]:
        """One write transaction in one round trip: BEGIN, the writers' lock, statement, COMMIT, sent as one simple
        query (the parameters bound on the client). statement is PostgreSQL's own spelling (%s), runs after the lock
        is held (so it sees a move mark committed meanwhile, and every writer's commit before it: it must read the
        mark itself and write nothing when there is one) and NOTIFYs itself when it writes. relaxed: the commit does
        not wait for the WAL flush (as relaxed()). Returns its rows."""
        raw = self._usable()
        relax = "SET LOCAL synchronous_commit TO OFF; " if relaxed else ""
        script = f"BEGIN; {relax}SELECT pg_advisory_xact_lock({int(self.target.lock_key)}); {statement}; COMMIT"
        self.statements += 1
        try:
            with raw.cursor() as cursor:
                cursor.execute(script, params if isinstance(params, Mapping) else tuple(params))
                for _ in range(3 if relaxed else 2):  # past BEGIN's, SET's and the lock's results, to the statement's
                    cursor.nextset()
                rows = cursor.fetchall()
                self._changes = cursor.rowcount
        except psycopg.OperationalError as exc:
            self._abandon(raw)
            raise StoreUnavailable(f"the inbox database cannot be written: {_first_line(exc)}") from None
        except BaseException:
            self._abandon(raw)
            raise
        self.commits += 1
        return rows

    def _abandon(self, raw: psycopg.Connection[Any]) -> None:
        if not raw.broken and not raw.closed and raw.info.transaction_status != TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                raw.execute("ROLLBACK")

    def close(self) -> None:
        self._raw.close()


def _last_result(cursor: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """The rows of the last statement of a simple query of several."""
    while cursor.nextset():
        pass
    return cursor.fetchall()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def connect(target: PgTarget, *, read_only: bool = False, migrate: bool = True) -> PgConnection:
    """Open an inbox in PostgreSQL, creating its schema and running its migrations unless read_only."""
    conn = PgConnection(target, read_only=read_only)
    try:
        if read_only:
            _check_readable(conn)
        elif migrate:
            _migrate(conn)
    except psycopg.Error as exc:  # the server went away, or its disk is full, while the inbox was looked at or made
        conn.close()
        raise StoreUnavailable(f"cannot open the inbox {target.display}: {_first_line(exc)}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def schema_version(conn: PgConnection) -> int:
    rows = conn.raw.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{conn.target.schema}.schema_version",)
    ).fetchall()
    if not rows[0][0]:
        return 0
    found = conn.raw.execute(f'SELECT version FROM "{conn.target.schema}".schema_version').fetchall()
    return int(found[0][0]) if found else 0


def _check_readable(conn: PgConnection) -> None:
    current = schema_version(conn)
    where = conn.target.display
    if current == 0:
        raise StoreError(f"no inbox at {where}: the schema {conn.target.schema} holds none (a command that only "
                         "reads never creates one: `agent-console run`, the console or `ingest` create it)")
    if current > SCHEMA_VERSION:
        raise newer_schema(where, current, SCHEMA_VERSION)
    if current < SCHEMA_VERSION:
        raise older_schema_to_read(where, current, SCHEMA_VERSION)


def _migrate(conn: PgConnection) -> None:
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise newer_schema(conn.target.display, current, SCHEMA_VERSION)
    if current == SCHEMA_VERSION:
        return
    schema = conn.target.schema
    raw = conn.raw
    try:
        with conn.write_transaction(guarded=False):  # before the schema holds the move mark's table
            raw.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            raw.execute(f'CREATE TABLE IF NOT EXISTS "{schema}".schema_version '
                        "(one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL)")
            current = schema_version(conn)  # another process may have migrated it meanwhile
            for number, _name, sql in migrations():
                if current < number:
                    raw.execute(sql.encode())
            raw.execute(f'INSERT INTO "{schema}".schema_version (one, version) VALUES (1, %s) '
                        "ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version", (SCHEMA_VERSION,))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(f"cannot create the inbox {conn.target.display}: {_first_line(exc)}") from None


class ChangeFeed:
    """Wakes a waiter when any connection, on any host, commits to this inbox (LISTEN/NOTIFY)."""

    def __init__(self, target: PgTarget) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        # Listening starts now, not at the first wait: a commit made between the two is then heard.
        with suppress(psycopg.Error, StoreError):
            self._listening()

    def _listening(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = PgConnection(self._target).raw
            conn.execute(f'LISTEN "{self._target.channel}"')
            self._conn = conn
        return self._conn

    def wait(self, timeout: float) -> bool:
        """True when a commit was announced within timeout seconds (or the connection was lost, so a
        commit may have gone unheard), False when nothing happened."""
        with self._lock:
            try:
                conn = self._listening()
                heard = False
                for _ in conn.notifies(timeout=timeout, stop_after=1):
                    heard = True
                if heard:  # drain what else arrived, so a burst of commits wakes once
                    for _ in conn.notifies(timeout=0):
                        pass
                return heard
            except (psycopg.Error, StoreError):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                return True

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
