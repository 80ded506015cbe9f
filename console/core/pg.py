"""The Backend on PostgreSQL: the URL, the connection, write transactions, migrations, wake-ups, and what
the Store asks of the storage (PgBackend, the protocol in core/backend.py).

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
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import TransactionStatus

from console.core.backend import AttemptEntry, MoveMark, QuickCheck
from console.core.errors import StoreError, StoreUnavailable, move_refusal, newer_schema, older_schema_to_read
from console.core.migrations import numbered_migrations
from console.core.pg_target import DEFAULT_SCHEMA, PgTarget, parse_target
from console.core.statements import (
    CLAIM_SET,
    COUNT_A_COPY,
    EVENT_COLUMNS,
    EVENT_FIELDS,
    INSERT_COLUMNS,
    INSERT_EVENT,
    LOG_ATTEMPT,
    MOVE_MARK,
    PAYLOAD_AS_STORED,
    SELECT_FRESH,
    payload_checksum,
)

__all__ = ["DEFAULT_SCHEMA", "ChangeFeed", "PgBackend", "PgConnection", "PgTarget", "connect", "parse_target"]
CONNECT_TIMEOUT = 10  # seconds; a server that is down is one clear line, not a hang
IDLE_IN_WRITE_MS = 5_000
# A transaction's commit record is on disk once the WAL is flushed past the insert position read after it. When it is
# not, a transaction that writes a record (a logical message: no table, no lock, nothing anybody reads; a transaction
# with an id that wrote no WAL would commit without a flush) commits durably, flushing the WAL up to its own commit and
# so past the earlier one. Nothing to flush when nothing was written: a refused ingest waits for no disk. Under
# synchronous replication (standbys named) a durable commit also waits for the standbys, which the local positions do
# not show: the record is then always written, and its commit waits for them as far as its own, past the earlier one.
FLUSHED = ("SELECT CASE WHEN current_setting('synchronous_standby_names') <> '' "
           "OR pg_current_wal_insert_lsn() > pg_current_wal_flush_lsn() "
           "THEN pg_logical_emit_message(true, 'agent-console', '') END")
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
    # The payload as text: PostgreSQL took it as valid UTF-8, and its checksum is taken on the text's bytes.
    text = _IS_NOT_VALUE.sub("IS DISTINCT FROM ", _INDEXED_BY.sub("", sql)).replace(PAYLOAD_AS_STORED, "payload")
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
            if _REFUSED_LOGIN.search(str(exc)):  # permanent until someone changes the settings: not tried again
                raise StoreError(f"the inbox database {where} refused the login: {_refused_line(exc)}") from None
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
        with session_errors(), self._usable().cursor() as cursor:
            cursor.executemany(translate(sql), list(seq))
            self._changes = cursor.rowcount

    def _run(self, sql: str, params: Sequence[Any] | None) -> _Rows:
        if not _READS.match(sql):
            self._wrote = True
        self.statements += 1
        with session_errors(), self._usable().cursor() as cursor:
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
        except psycopg.Error as exc:
            self._abandon(raw)
            if session_gone(exc):
                raise StoreUnavailable(f"the inbox database cannot be written: {_first_line(exc)}") from None
            raise
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
        except psycopg.Error as exc:
            self._abandon(raw)
            if session_gone(exc):  # e.g. 25P03: the server ended the transaction while this process was frozen
                raise StoreUnavailable(f"the inbox database cannot be written: {_first_line(exc)}") from None
            raise

    def locked_then_flushed(self, statement: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """statement (a call of a function that takes the writers' lock and writes) as its own durable transaction, in
        one round trip. A writer that finds the lock free commits as usual, holding it through its WAL flush. One that
        finds it taken (other writers at work) commits without waiting for the flush, so the writers behind it need
        not wait for its flush as well, then waits for the flush once the lock is released (FLUSHED): their flushes
        are shared (the server's group commit) instead of taken in turn. Either way nothing is answered before the
        WAL holding it is on disk. Returns the statement's rows."""
        raw = self._usable()
        self.statements += 1
        key = int(self.target.lock_key)
        try:
            with raw.cursor() as cursor:
                cursor.execute(f"BEGIN; SELECT CASE WHEN pg_try_advisory_xact_lock({key}) THEN '' "
                               f"ELSE set_config('synchronous_commit', 'off', true) END; {translate(statement)}; "
                               f"COMMIT; {FLUSHED}", tuple(params))
                cursor.nextset()  # past BEGIN's and the lock's results, to the statement's
                cursor.nextset()
                rows = cursor.fetchall()
        except psycopg.Error as exc:
            self._abandon(raw)
            if session_gone(exc):
                raise StoreUnavailable(f"the inbox database cannot be written: {_first_line(exc)}") from None
            raise
        except BaseException:
            self._abandon(raw)
            raise
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


# What a server says when it refuses the login itself (libpq gives these no SQLSTATE): a wrong or missing password,
# a role or database that does not exist, pg_hba.conf, no CONNECT privilege. Nothing a retry changes.
_REFUSED_LOGIN = re.compile(r"password authentication failed|no password supplied|role \"[^\"]*\" does not exist|"
                            r"database \"[^\"]*\" does not exist|pg_hba\.conf rejects|no pg_hba\.conf entry|"
                            r"permission denied for database|authentication failed for user")


def _refused_line(exc: BaseException) -> str:
    found = re.search(r"FATAL:\s*(.*)", str(exc))
    return found.group(1).strip().splitlines()[0] if found else _first_line(exc)


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


# How long one wait of the change feed may last: close() ends it at once (an eventfd beside the socket), so only
# the caller's own timeouts are served by a shorter one. Where os.eventfd is missing, waits stay short.
LONGEST_WAIT = 30.0
SHORT_WAIT = 0.5


class ChangeFeed:
    """Wakes a waiter when any connection, on any host, commits to this inbox (LISTEN/NOTIFY).

    A wait sleeps in poll() on the listening connection's socket and an eventfd, and reads what arrived without
    blocking; close() from another thread writes the eventfd, so it ends a wait under way at once (the wait then
    closes the connection) and a waiter may wait LONGEST_WAIT at a time. psycopg's own notifies() wait holds the
    connection, so close() had to wait for it, and the engine's watcher waited half a second at a time only to
    notice it was stopping: two wake-ups a second of an idle console. Without eventfd (not Linux) waits stay
    short (SHORT_WAIT)."""

    def __init__(self, target: PgTarget) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False
        self._waiting = False  # a wait is in poll(): it, not close(), then closes the connection and the eventfd
        eventfd = getattr(os, "eventfd", None)
        self._closer: int | None = None if eventfd is None else eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.longest_wait = SHORT_WAIT if self._closer is None else LONGEST_WAIT
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
        commit may have gone unheard), False when nothing happened or the feed was closed."""
        with self._lock:
            if self._closed:
                return False
            self._waiting = True
        try:
            return self._wait(timeout)
        except (psycopg.Error, StoreError):
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
            return not self._closed
        finally:
            with self._lock:
                self._waiting = False
                if self._closed:  # close() came while this wait polled: it left the connection to it
                    self._release()

    def _wait(self, timeout: float) -> bool:
        conn = self._listening()
        if self._heard(conn):  # announced before this wait (or received while the connection did other work)
            return True
        closer = self._closer
        if closer is None:
            for _ in conn.notifies(timeout=max(0.0, timeout), stop_after=1):
                self._heard(conn)  # drain what else arrived, so a burst of commits wakes once
                return True
            return False
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        poller.register(closer, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(max(0, round(timeout * 1000)))}
        if self._closed or closer in ready:
            return False
        # Readable: a notification (drained whole, so a burst of commits wakes once), or the server's other
        # chatter (False: the caller waits again); a connection the server closed raises, and is opened again.
        return conn.fileno() in ready and self._heard(conn)

    @staticmethod
    def _heard(conn: psycopg.Connection[Any]) -> bool:
        """Whether a notification has arrived, read without blocking (every one that has: a burst wakes once)."""
        heard = False
        for _ in conn.notifies(timeout=0):
            heard = True
        return heard

    def close(self) -> None:
        """Close the feed; a wait under way in another thread ends at once (returning False)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._waiting and self._closer is not None:
                os.eventfd_write(self._closer, 1)  # the wait wakes, and closes the connection on its way out
                return
            self._release()

    def _release(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._closer is not None:
            os.close(self._closer)
            self._closer = None


# What says "the inbox's server or this session is gone, or cannot serve now" (issue 37): StoreUnavailable, one
# kind for every caller, tried again later. By SQLSTATE class: 08 connection exception, 53 insufficient resources
# (disk full, out of memory, too many connections), 57 operator intervention (57P01 admin shutdown, 57P02 crash
# shutdown, 57P03 cannot connect now, 57P04 database dropped, 57P05 idle session timeout, 57014 query canceled),
# 58 system error (I/O error); and one by one: 25P03 (idle-in-transaction timeout: the server ended the
# transaction of a process that was frozen inside it, and the session with it; psycopg calls it an InternalError),
# 25006 (a read-only standby), 55P03 (lock timeout: the inbox is busy), 40001 / 40P01 (serialization failure,
# deadlock: the transaction is undone whole). A connection lost mid-statement has no SQLSTATE
# (psycopg.OperationalError: "server closed the connection unexpectedly", "consuming input failed"), nor has a
# connection psycopg itself closed (psycopg.InterfaceError).
GONE_CLASSES = ("08", "53", "57", "58")
GONE_STATES = frozenset({"25P03", "25006", "55P03", "40001", "40P01"})


def session_gone(exc: BaseException) -> bool:
    """Whether a psycopg error means the server or the session is gone or cannot serve now (GONE_CLASSES)."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return True
    state = getattr(exc, "sqlstate", None)
    return isinstance(state, str) and (state[:2] in GONE_CLASSES or state in GONE_STATES)


@contextmanager
def session_errors(what: str = "reached") -> Iterator[None]:
    """A statement's error that means the server or the session is gone, as StoreUnavailable ("the inbox database
    cannot be <what>: ..."); others as they are (a constraint, a bug in a statement)."""
    try:
        yield
    except psycopg.Error as exc:
        if session_gone(exc):
            raise StoreUnavailable(f"the inbox database cannot be {what}: {_first_line(exc)}") from exc
        raise


def storage_errors() -> AbstractContextManager[None]:
    """A server that went away or refused a write (read-only standby, disk full) is the same kind of trouble
    as a busy or full SQLite file: StoreUnavailable, and the caller tries again later."""
    return session_errors("written")


class PgBackend:
    """One inbox schema in PostgreSQL, over one PgConnection: the same SQL as on SQLite (PgConnection
    translates its few spellings); what differs is the storage's own (the schema's version, the size on
    disk, the integrity check, change notification) and how a batch is claimed and finished: one statement
    for the whole set, where SQLite runs one cheap statement a row (each statement here is a round trip, a
    parse and a plan)."""

    name = "postgresql"
    DURABILITY_SETTINGS = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self.target = conn.target

    @classmethod
    def open(cls, url: str, *, read_only: bool = False, schema: str | None = None,
             password_env: str | None = None) -> PgBackend:
        target = parse_target(url, schema=schema, password_env=password_env)
        return cls(connect(target, read_only=read_only))

    @property
    def path(self) -> str:
        return self.target.display

    @property
    def conn(self) -> PgConnection:
        return self._conn

    def reopen(self) -> PgBackend:
        return PgBackend(PgConnection(self.target, read_only=self._conn.read_only))

    def close(self) -> None:
        self._conn.close()

    # --- writing ------------------------------------------------------------------------------
    @contextmanager
    def transaction(self, *, guarded: bool = True, relaxed: bool = False) -> Iterator[None]:
        if relaxed:
            with self._conn.relaxed(), self._conn.write_transaction(guarded=guarded):
                yield
        else:
            with self._conn.write_transaction(guarded=guarded):
                yield

    @contextmanager
    def write_transaction(self, *, guarded: bool = True, relaxed: bool = False) -> Iterator[None]:
        with storage_errors(), self.transaction(guarded=guarded, relaxed=relaxed):
            yield

    def storage_errors(self) -> Any:
        return storage_errors()

    # --- the change feed ----------------------------------------------------------------------
    def change_feed(self) -> ChangeFeed:
        """A LISTEN on this inbox's channel: every write transaction that wrote NOTIFYs it as it commits."""
        return ChangeFeed(self.target)

    def data_version(self) -> int:
        """Changes when a transaction that writes starts or ends anywhere on the server (it may be another
        inbox's: a spare change, never a missed one). The snapshot's text (xmin:xmax:in-progress ids)
        changes when any writing transaction commits, which its xmax alone does not (a transaction holds
        its id from its first write). Waiters use change_feed(), which hears this inbox only."""
        return int(self._scalar("SELECT hashtext(pg_current_snapshot()::text)"))

    def _scalar(self, sql: str, params: Any = ()) -> Any:
        rows = self._conn.execute(sql, params).fetchall()
        return rows[0][0] if rows else None

    # --- facts about the storage --------------------------------------------------------------
    def move_mark(self) -> tuple[str, str, int] | None:
        rows = self._conn.execute(MOVE_MARK).fetchall()
        return (str(rows[0][0]), str(rows[0][1]), int(rows[0][2])) if rows else None

    def durability_settings(self) -> dict[str, str]:
        """The server's settings that decide what an acknowledged commit survives, as this connection sees
        them (benchmarks print them; `relaxed` commits still turn synchronous_commit off for themselves)."""
        rows = self._conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(?)", (list(self.DURABILITY_SETTINGS),)
        ).fetchall()
        found = {str(name): str(value) for name, value in rows}
        return {name: found.get(name, "?") for name in self.DURABILITY_SETTINGS}

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
        return schema_version(self._conn)

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
        where = self.path
        if current != SCHEMA_VERSION:
            if current > SCHEMA_VERSION:
                raise newer_schema(where, current, SCHEMA_VERSION)
            raise StoreError(f"inbox {where} has schema version {current}, not this agent-console's "
                             f"({SCHEMA_VERSION}): open it once with `agent-console run` to upgrade it")
        if probe_write and not self._conn.read_only:
            try:
                with storage_errors(), self.transaction():
                    self._conn.execute("UPDATE schema_version SET version = version WHERE one = 1")
            except psycopg.Error as exc:  # a role that may not write, say: what the server said, in one line
                raise StoreError(f"inbox {where} cannot take a write: {_first_line(exc)}") from None
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

    # --- a batch in one statement ---------------------------------------------------------------
    # Writers hold the inbox's advisory lock for the whole transaction, so the set read by a subquery cannot
    # change before the UPDATE takes it: no FOR UPDATE / SKIP LOCKED needed (one worker per inbox).
    def claim_fresh(self, gen: int, now: int, cap: int) -> list[Any]:
        return self._conn.execute(_CLAIM_FRESH_SET, (gen, now, cap)).fetchall()

    def claim_fresh_statement(self) -> tuple[str, tuple[int, ...]]:
        return _CLAIM_FRESH_SET, (1, 0, 1)

    def finish_done(self, ids: Sequence[int], gen: int, now: int) -> set[int]:
        if not ids:
            return set()
        rows = self._conn.execute(_FINISH_SET, (now, list(ids), gen)).fetchall()
        return {int(row[0]) for row in rows}

    def log_attempts(self, entries: Sequence[AttemptEntry]) -> None:
        if len(entries) == 1:
            self._conn.execute(LOG_ATTEMPT, entries[0])
        elif entries:
            columns = [list(column) for column in zip(*entries, strict=True)]
            # WITH ORDINALITY keeps the entries' order in the ids the rows get (history reads by id).
            self._conn.execute(_LOG_ATTEMPTS_SET, columns)

    # --- the usual ingest, claim and finish in one round trip each (Backend.try_*) ---------------------------------
    # The shared path's are four, eight and five. One statement does the shared path's fenced work for the common
    # case (the lease held, no move mark, no lost, retried or hand-retried event to see to first; a finish that
    # succeeded and stages nothing) and writes nothing otherwise, saying so: the method declines and the shared path
    # runs. Each is a PL/pgSQL function (pg_schema 0013 and 0020: ingest and ingest_many, durable; 0014 and 0021: claim
    # and finish, relaxed) run as its own transaction: the same steps as a simple query of several statements, but
    # planned once a session (the simple query was planned on every call, which took as long as running it). They do
    # what core/statements.py's statements do (tests/core/test_hot_path_parity.py compares the rows both leave). A
    # single ingest that finds the writers' lock taken (or an ingest_many that has to wait for it) waits for its flush
    # after releasing it (locked_then_flushed): producers ingesting at once share their flushes instead of taking
    # turns through them, and the engine's claims and finishes do not wait behind a producer's flush.
    def try_ingest(
        self, source: str, source_id: str, encode: Callable[[], str], now: int
    ) -> tuple[bool, MoveMark | None] | None:
        try:
            text = encode()
        except ValueError:  # a bad payload under a stored key is a copy, as on SQLite: the shared path reads the key
            return None
        # The lock free: one durable statement (pg_schema 0020). Taken: told at once, and stored the other way.
        params = (int(self.target.lock_key), self.target.channel, source, source_id, text, payload_checksum(text), now)
        rows = self._conn.execute(_INGEST_ONE, (*params, True)).fetchall()
        if rows[0][4]:
            rows = self._conn.locked_then_flushed(_INGEST_ONE, (*params, False))
        self._conn.commits += 1  # the statement's own transaction
        stored, mark = rows[0][0], rows[0][1:4]
        return bool(stored), None if mark[0] is None else (str(mark[0]), str(mark[1]), int(mark[2]))

    def try_ingest_many(
        self, encoded: Sequence[tuple[str, str, str]], now: int, *, traces: Mapping[tuple[str, str], str] | None = None
    ) -> tuple[list[bool], MoveMark | None] | None:
        if len({(source, source_id) for source, source_id, _ in encoded}) != len(encoded):
            return None  # a key twice in the call: insert_events' waves, in the shared path's transaction
        kept = traces or {}
        columns: list[list[Any]] = [[entry[part] for entry in encoded] for part in range(3)]
        columns.append([payload_checksum(text) for _, _, text in encoded])
        columns.append([kept.get((source, source_id)) for source, source_id, _ in encoded])
        rows = self._conn.locked_then_flushed(_INGEST_SET, (int(self.target.lock_key), self.target.channel, *columns,
                                                            now))
        self._conn.commits += 1  # the statement's own transaction
        if rows and rows[0][3] is not None:
            return [], (str(rows[0][3]), str(rows[0][4]), int(rows[0][5]))
        stored = {(str(source), str(source_id)): copies == 0 for source, source_id, copies, *_ in rows}
        return [stored[source, source_id] for source, source_id, _ in encoded], None

    def count_refusals(self, held: Sequence[tuple[str, str, int, int]]) -> None:
        # One statement for them all (a statement a key is cheap only on SQLite).
        self._conn.execute(_COUNT_REFUSED_SET, [list(column) for column in zip(*held, strict=True)])

    def try_claim(self, holder: str, gen: int, now: int, cap: int) -> list[Any] | None:
        with storage_errors():  # a server gone or the lock not had in time: tried again later, as the shared path's
            rows = self._conn.execute(_CLAIM_ONE_GO, (int(self.target.lock_key), self.target.channel, holder, gen,
                                                      now, cap)).fetchall()
        self._conn.commits += 1  # the statement's own transaction
        if not rows[0][0]:
            return None
        return [row[1:] for row in rows if row[1] is not None]

    def try_finish(self, holder: str, gen: int, ids: Sequence[int], now: int) -> bool:
        with storage_errors():
            rows = self._conn.execute(_FINISH_ONE_GO, (int(self.target.lock_key), self.target.channel, holder, gen,
                                                       list(ids), now)).fetchall()
        self._conn.commits += 1  # the statement's own transaction
        return bool(rows[0][0])  # not: not the lease holder, or a move mark (the shared path records and says so)

    def insert_events(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
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
                source, source_id, text = encoded[index]
                rows = self._conn.execute(INSERT_EVENT, (source, source_id, text, payload_checksum(text), now, now,
                                                         None)).fetchall()
                new[index] = rows[0][0] == 0
                continue
            columns: list[list[Any]] = [[encoded[index][part] for index in wave_indexes] for part in range(3)]
            columns.append([payload_checksum(encoded[index][2]) for index in wave_indexes])
            rows = self._conn.execute(_INSERT_SET, (now, now, *columns)).fetchall()
            stored = {(str(source), str(source_id)): duplicates == 0 for source, source_id, duplicates in rows}
            for index in wave_indexes:
                new[index] = stored[encoded[index][0], encoded[index][1]]
        return new


    # --- moving a whole inbox (copy.py) ---------------------------------------------------------
    @property
    def location(self) -> str:
        return self.target.display

    def tables(self) -> set[str]:
        rows = self._conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        return {str(row[0]) for row in rows}

    def columns(self, table: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ? ORDER BY ordinal_position", (table,)
        ).fetchall()
        return [str(name) for (name,) in rows]

    def begin_snapshot(self) -> None:
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def lift_idle_limit(self) -> None:
        """A session of this product ends a transaction idle for IDLE_IN_WRITE_MS (a frozen process must not
        hold the writers' lock); a copy's transactions wait on the other side between statements, so they
        lift it for themselves."""
        self._conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")

    def bulk_insert(self, table: str, columns: Sequence[str], chunks: Iterable[list[tuple[Any, ...]]]) -> int:
        """By COPY: a row a statement would cost a parse and a plan each (~40x slower)."""
        moved = 0
        names = ", ".join(columns)
        with self._conn.raw.cursor() as cursor, cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for chunk in chunks:
                for row in chunk:
                    copy.write_row(row)
                moved += len(chunk)
        return moved

    def pause_counting(self, counted: Mapping[str, str]) -> None:
        """A counting trigger updates the one counts row per row loaded: in one transaction each update walks
        every earlier version of that row, so a load's cost grows with the square of its rows. They are off
        inside the loading transaction (nobody else writes the target meanwhile: it is marked) and each table
        is counted once at the end (recount)."""
        for table in counted:
            self._conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")

    def recount(self, counted: Mapping[str, str]) -> None:
        for table, counts in counted.items():
            self._conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
            self._conn.execute(
                f"UPDATE {counts} SET n = (SELECT COUNT(*) FROM {table} WHERE {table}.status = {counts}.status)")

    def advance_identities(self, tables: Sequence[str]) -> None:
        for table in tables:
            if "id" not in self.columns(table):
                continue
            sequence = self._conn.execute("SELECT pg_get_serial_sequence(?, 'id')", (table,)).fetchall()
            if sequence[0][0] is not None:
                self._conn.execute(
                    f"SELECT setval(?, COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)", (sequence[0][0],)
                )


_CLAIM_FRESH_SET = f"{CLAIM_SET} WHERE id IN ({SELECT_FRESH}) RETURNING {EVENT_COLUMNS}"
_FINISH_SET = """UPDATE inbox SET status = 'done', error = NULL, updated_at = ?
                  WHERE id = ANY(?) AND status = 'running' AND claim_gen = ? RETURNING id"""
_LOG_ATTEMPTS_SET = """INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
    SELECT event_id, at, kind, holder, gen, detail
      FROM unnest(?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::bigint[], ?::text[])
           WITH ORDINALITY AS entry(event_id, at, kind, holder, gen, detail, n)
     ORDER BY n"""
# Rows are inserted in the call's order (WITH ORDINALITY), so ids ascend as they would one by one.
_INSERT_SET = f"""INSERT INTO inbox ({INSERT_COLUMNS})
    SELECT source, source_id, payload, payload_crc32, ?, ?, NULL
      FROM unnest(?::text[], ?::text[], ?::text[], ?::bigint[])
           WITH ORDINALITY AS entry(source, source_id, payload, payload_crc32, n)
     ORDER BY n
    {COUNT_A_COPY}
    RETURNING source, source_id, duplicates"""
# ingest and ingest_many of keys each once in the call, one statement each (pg_schema 0020, 0021): answers (stored, the
# move mark's state, other, at or NULLs), and a row per event (source, source_id, copies) or one row with the mark.
_INGEST_ONE = ("SELECT stored, mark_state, mark_other, mark_at, busy "
               "FROM inbox_ingest_one(?, ?, ?, ?, ?, ?::bigint, ?, ?::boolean)")
_INGEST_SET = "SELECT * FROM inbox_ingest_set(?, ?, ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?)"
# Refused copies held in memory, counted on their events in one statement.
_COUNT_REFUSED_SET = """UPDATE inbox SET duplicates = inbox.duplicates + held.copies, last_duplicate_at = held.last
    FROM unnest(?::text[], ?::text[], ?::bigint[], ?::bigint[]) AS held(source, source_id, copies, last)
   WHERE inbox.source = held.source AND inbox.source_id = held.source_id"""
# The usual claim and finish, one statement each (pg_schema 0014), relaxed commits: see try_claim/try_finish.
# The claim hands back whole inbox rows (pg_schema 0021); the event's columns are picked here, in the core's order.
_CLAIM_ONE_GO = (f"SELECT applied, {', '.join(f'(event_row).{field}' for field in EVENT_FIELDS)} "
                 "FROM inbox_claim_fresh(?, ?, ?, ?, ?, ?)")
_FINISH_ONE_GO = "SELECT * FROM inbox_finish_done(?, ?, ?, ?, ?::bigint[], ?)"
