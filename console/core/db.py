"""The one place that opens SQLite: apsw, pragmas, write transactions and migrations.

Every transaction that may write starts with BEGIN IMMEDIATE, so SQLite serialises writers at the
start of the transaction instead of failing one of them half-way with SQLITE_BUSY on upgrade.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

from console.core.backend import WAL_SIZE_LIMIT, QuickCheck
from console.core.errors import (
    InboxDamaged,
    StoreError,
    StoreUnavailable,
    damage_line,
    damage_met,
    move_refusal,
    newer_schema,
    older_schema_to_read,
    register_backend_errors,
)
from console.core.migrations import numbered_migrations
from console.core.statements import MOVE_MARK

# Versions 3.7.0 to 3.51.2 carry the WAL-reset corruption bug, which needs two connections on one
# file: exactly how this product runs (the console, the webhook receiver and CLI ingests).
MIN_SQLITE = (3, 51, 3)
BUSY_TIMEOUT_MS = 5000  # the default of the busy_timeout setting, which a Store opened from settings passes
# Every commit that waits for the disk writes each page it changed to the WAL, and an ingest changes
# five (the row, its key, two indexes, the counts): with 1 KiB pages that is a quarter of the bytes
# to fsync, which measured ~24% faster durable ingests than SQLite's 4 KiB default on this project's
# rows (docs/performance.md). Only a new file takes it; an existing one keeps its size.
NEW_FILE_PAGE_SIZE = 1024

# How much the WAL takes before a commit checkpoints it (PRAGMA wal_autocheckpoint, in pages of the file's size).
# SQLite's default is 1000 pages, whatever their size: 1 MB with our 1 KiB pages, so a checkpoint (an fsync of the
# WAL, the pages copied, an fsync of the file, and the WAL header's own fsync when it starts over) every ~125
# single ingests, four times as often as with 4 KiB pages. By bytes, as with 4 KiB pages, and under WAL_SIZE_LIMIT
# so that a WAL that starts over is never cut and grown again.
WAL_CHECKPOINT_BYTES = 3 * 1024 * 1024

SQLITE_MAGIC = b"SQLite format 3\x00"
# apsw's errors are this backend's: the neutral modules know which mean damage without importing apsw.
register_backend_errors(errors=apsw.Error, damage=(apsw.CorruptError, apsw.NotADBError))


def sqlite_version() -> tuple[int, int, int]:
    parts = [int(p) for p in apsw.sqlite_lib_version().split(".")[:3]]
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def check_sqlite_version(version: tuple[int, int, int] | None = None) -> None:
    found = version or sqlite_version()
    if found < MIN_SQLITE:
        have = ".".join(map(str, found))
        need = ".".join(map(str, MIN_SQLITE))
        raise StoreError(
            f"SQLite {have} is too old: versions 3.7.0 to 3.51.2 can corrupt a WAL database shared by "
            f"two connections; agent-console needs {need} or newer (upgrade the apsw package)"
        )


def migrations() -> list[tuple[int, str, str]]:
    """The SQLite schema's numbered migrations (console/core/schema), in order."""
    return numbered_migrations("schema")


SCHEMA_VERSION = len(migrations())


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _check_path(path: Path, *, read_only: bool = False) -> None:
    """Refuse, before SQLite opens it, a path no inbox can live at. Only the file's type is looked at
    first: opening a FIFO to read its header would wait for a writer for ever."""
    folder = path.parent
    # A reader never creates an inbox: a typo in --db would otherwise show a new, empty one as if it
    # were the user's, and leave it behind.
    nothing_here = f"no inbox at {path}: {{}} (a command that only reads never creates one: check --db or " \
                   "AGENT_CONSOLE_DB; `agent-console run`, the console or `ingest` create a new inbox)"
    if not folder.is_dir():
        if read_only:
            raise StoreError(nothing_here.format(f"the folder {folder} does not exist"))
        raise StoreError(f"cannot open inbox {path}: the folder {folder} does not exist")
    try:
        info = path.stat()
    except FileNotFoundError:
        if read_only:
            raise StoreError(nothing_here.format("the file does not exist")) from None
        return
    except OSError as exc:
        raise StoreError(f"cannot open inbox {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(f"cannot open inbox {path}: it is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "a special file")
        raise StoreError(f"cannot open inbox {path}: it is {kind}, not a regular file")
    # Checked by mode bits and not os.access, which says yes to root for a 0444 file.
    writable = info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) and os.access(path, os.W_OK)
    if not read_only and not writable:
        raise StoreError(f"cannot open inbox {path}: the file is read-only")
    magic = _read_header(path)
    if read_only and not magic:
        raise StoreError(nothing_here.format("the file is empty"))
    if magic and magic != SQLITE_MAGIC:
        raise StoreError(f"cannot open inbox {path}: the file is not a SQLite database")


def _read_header(path: Path) -> bytes:
    """The file's first 16 bytes. A kernel file that calls itself regular (/proc/self/mem) may refuse
    to be read at all: that is one line too, never a traceback."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(f"cannot open inbox {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # swapped for something else since the stat
            raise StoreError(f"cannot open inbox {path}: it is not a regular file")
        return os.pread(descriptor, 16, 0)
    except OSError as exc:
        raise StoreError(f"cannot open inbox {path}: reading it fails ({exc.strerror or exc}): "
                         "it is not a regular file") from None
    finally:
        os.close(descriptor)


OWNER_ONLY = 0o600


def _create_owner_only(path: Path) -> None:
    """Create a new inbox file readable by its owner only, before SQLite does: SQLite makes a new
    database 0644 (exactly that, whatever the umask), and gives the -wal and -shm it creates beside it
    the database file's mode. An empty file is about to become a new inbox, so it is tightened too;
    an existing inbox keeps whatever mode its owner gave it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, OWNER_ONLY)
    except OSError as exc:
        raise StoreError(f"cannot create inbox {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISREG(info.st_mode) and info.st_size == 0 and stat.S_IMODE(info.st_mode) != OWNER_ONLY:
            os.fchmod(descriptor, OWNER_ONLY)
    except OSError:
        pass  # a file system without modes (a FAT stick) holds the file as it can
    finally:
        os.close(descriptor)


def connect(
    path: str | os.PathLike[str],
    *,
    check: bool = False,
    migrate: bool = True,
    read_only: bool = False,
    schema_version: int | None = None,
    vfs: str | None = None,
    busy_timeout: float | None = None,
) -> apsw.Connection:
    """Open (creating if needed) one inbox file with this project's pragmas and schema.

    check runs quick_check, which reads the whole file: worth it where a long-lived process starts (the
    engine), not for every short command. read_only opens the file as it is, for reading only: it
    never takes the write lock, never creates or migrates the file, and refuses one whose schema is
    not this version's. schema_version stops the migrations at that number (tests use it to build an
    older file). vfs names a registered SQLite VFS: the power-cut tests route every write and fsync
    through one. A VFS written in Python has no shared memory, so that connection holds the file
    exclusively. busy_timeout: the seconds a write waits for another process's write lock (the busy_timeout
    setting; default BUSY_TIMEOUT_MS).
    """
    check_sqlite_version()
    busy_ms = BUSY_TIMEOUT_MS if busy_timeout is None else max(1, round(busy_timeout * 1000))
    target = Path(path).expanduser().absolute()
    _check_path(target, read_only=read_only)
    conn: apsw.Connection | None = None
    try:
        if read_only:
            conn = apsw.Connection(str(target), flags=apsw.SQLITE_OPEN_READONLY)
            _prepare_reader(conn, target, check, busy_ms)
            return conn
        _create_owner_only(target)
        conn = apsw.Connection(str(target), vfs=vfs) if vfs else apsw.Connection(str(target))
        if vfs:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # WAL without shared memory
        _prepare(conn, target, check, SCHEMA_VERSION if schema_version is None else schema_version, migrate, busy_ms)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, apsw.Error):
            raise _open_error(target, exc, busy_ms) from exc
        raise
    return conn


def _prepare(conn: apsw.Connection, target: Path, check: bool, upto: int, migrate: bool, busy_ms: int) -> None:
    conn.set_busy_timeout(busy_ms)
    conn.execute(f"PRAGMA page_size={NEW_FILE_PAGE_SIZE}")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
    if str(mode).lower() != "wal":
        raise StoreError(f"cannot open inbox {target}: WAL mode was refused (got {mode})")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    page_size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
    conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_BYTES // page_size}")
    if check:
        _refuse_damage(conn, target)
    if migrate:
        _migrate(conn, target, upto)


def _prepare_reader(conn: apsw.Connection, target: Path, check: bool, busy_ms: int) -> None:
    conn.set_busy_timeout(busy_ms)
    current = user_version(conn)
    if current > SCHEMA_VERSION:
        raise newer_schema(target, current, SCHEMA_VERSION)
    if current < SCHEMA_VERSION:
        raise older_schema_to_read(target, current, SCHEMA_VERSION)
    if check:
        _refuse_damage(conn, target)


def _refuse_damage(conn: apsw.Connection, target: Path) -> None:
    problems = integrity_problems(conn, quick=True)
    if problems:
        raise InboxDamaged(damage_line(target, problems))


def integrity_problems(conn: apsw.Connection, *, quick: bool = False) -> list[str]:
    """What SQLite's integrity check finds wrong, one line each; [] for a sound file. quick_check skips
    the comparison of indexes with their tables (several times faster); both read every page."""
    try:
        rows = conn.execute("PRAGMA quick_check" if quick else "PRAGMA integrity_check").fetchall()
    except (apsw.CorruptError, apsw.NotADBError) as exc:  # too damaged for the check to walk it
        return [str(exc)]
    return _problem_lines(rows)


def _problem_lines(rows: list[tuple[Any, ...]]) -> list[str]:
    if rows == [("ok",)]:
        return []
    # The rows are multi-line with a "*** in database main ***" banner: the user gets the lines.
    lines = [line.strip() for row in rows for line in str(row[0]).splitlines()]
    return [line for line in lines if line and not line.startswith("***")]


# The check looks at the clock every this many of SQLite's virtual machine steps. Inside the integrity check one
# step can be a page's whole walk (a long overflow chain): every 100 steps overshot a 0.1 s bound by ~0.1 s on
# ~900 KB payloads, every 10 by under 10 ms, at no measurable cost to a whole check.
_CHECK_STEPS = 10
# The page cache a check runs with (KiB). A check reads every page once and never again, so a larger cache only
# holds pages nobody asks for; with the default (2,000 KiB) the engine's writer kept them after its start-up
# check for as long as the process ran (docs/performance.md, "1,000,000 events": peak RSS).
QUICK_CHECK_CACHE_KIB = 128


def bounded_quick_check(conn: apsw.Connection, *, seconds: float) -> QuickCheck:
    """SQLite's quick check, stopped once it has run `seconds` (a progress handler interrupts it). A check
    that stops finds nothing (SQLite reports what it found only at the end): finished=False says the file was
    not all read. It only reads: a read-only connection can run it, and the file's bytes stay as they were."""
    started = time.monotonic()
    deadline = started + max(0.0, seconds)
    conn.set_progress_handler(lambda: time.monotonic() > deadline, _CHECK_STEPS)
    try:
        with small_page_cache(conn):
            rows = conn.execute("PRAGMA quick_check").fetchall()
    except apsw.InterruptError:
        return QuickCheck([], False, time.monotonic() - started)
    except (apsw.CorruptError, apsw.NotADBError) as exc:  # too damaged for the check to walk it
        return QuickCheck([str(exc)], True, time.monotonic() - started)
    finally:
        conn.set_progress_handler(None)
    return QuickCheck(_problem_lines(rows), True, time.monotonic() - started)


@contextmanager
def small_page_cache(conn: apsw.Connection) -> Iterator[None]:
    """The connection's page cache cut to QUICK_CHECK_CACHE_KIB while a check reads the whole file, then its own
    size again. Setting a smaller size lets SQLite free the pages over it, so the check leaves no full cache
    behind."""
    size = int(conn.execute("PRAGMA cache_size").fetchall()[0][0])
    conn.execute(f"PRAGMA cache_size = -{QUICK_CHECK_CACHE_KIB}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size = {size}")


def _open_error(target: Path, exc: apsw.Error, busy_ms: int) -> StoreError:
    if isinstance(exc, apsw.NotADBError):
        return StoreError(f"cannot open inbox {target}: the file is not a SQLite database")
    if isinstance(exc, apsw.ReadOnlyError):
        return StoreError(f"cannot open inbox {target}: the file is read-only")
    if isinstance(exc, apsw.CorruptError):
        return damage_met(target, exc)
    if isinstance(exc, apsw.BusyError):
        return StoreUnavailable(f"cannot open inbox {target}: another process kept it busy for {busy_ms} ms")
    return StoreError(f"cannot open inbox {target}: {exc}")


def wal_path(path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(path)}-wal")


def shrink_wal(conn: apsw.Connection) -> bool:
    """Checkpoint every frame of the WAL into the file and truncate the WAL to nothing, unless a reader
    still needs its frames. Never waits: a reader or writer in the way makes it return False at once
    (try again later) instead of holding the write lock while it waits for the reader."""
    busy_ms = _busy_ms(conn)
    conn.set_busy_timeout(0)
    try:
        busy, _log_frames, _checkpointed = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
    except apsw.BusyError:
        return False
    finally:
        conn.set_busy_timeout(busy_ms)
    return not busy


def _busy_ms(conn: apsw.Connection) -> int:
    """How long this connection's writes wait for another's write lock, in milliseconds."""
    return int(conn.execute("PRAGMA busy_timeout").fetchall()[0][0])


def user_version(conn: apsw.Connection) -> int:
    """The number of the last schema migration applied to this file."""
    return int(conn.execute("PRAGMA user_version").fetchall()[0][0])


def _migrate(conn: apsw.Connection, path: Path, upto: int) -> None:
    # Looked at outside a transaction first: a current file (nearly every open) takes no write lock.
    current = user_version(conn)
    if current > SCHEMA_VERSION:
        raise newer_schema(path, current, SCHEMA_VERSION)
    if current >= upto:
        return
    with transaction(conn, guarded=False):  # a moved inbox is migrated too: its reads need the current schema
        current = user_version(conn)  # another process may have migrated it meanwhile
        for number, _name, sql in migrations():
            if current < number <= upto:
                conn.execute(sql)
                conn.execute(f"PRAGMA user_version = {number}")


@contextmanager
def transaction(
    conn: apsw.Connection, *, guarded: bool = True, relaxed: bool = False, translated: bool = False
) -> Iterator[apsw.Connection]:
    """A write transaction on a SQLite file that always ends: COMMIT on success, ROLLBACK on any error (the
    Store's are its Backend's write_transaction; pg.PgConnection serialises its writers the same way).

    A guarded transaction first reads the inbox's move mark and raises its MoveRefusal when there is one:
    read inside the write lock, so a write either commits before `migrate` marks the inbox (and is in the
    copy's snapshot) or sees the mark. Only migrations and `migrate` itself write unguarded.

    relaxed: the commit skips its fsync (WAL + synchronous=NORMAL): it survives a process crash at once and a
    power loss from the next FULL commit on (any connection's: WAL frames become durable in order). Only for
    commits that have told the outside world nothing yet, so that a power cut can undo nothing anybody saw:
    claims, finishes (their messages go out only after the outbox's own FULL commit), and the count of refused
    duplicates. Acks, answers, journalled steps and the outbox's claims before a send always wait for their fsync.

    translated: the errors a caller can meet at run time come out as StoreUnavailable (translate_errors). All
    three in one context, not three nested ones: a write transaction is the core's hottest path."""
    try:
        if relaxed:
            conn.execute("PRAGMA synchronous=NORMAL")
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except apsw.BusyError as exc:
                raise StoreUnavailable(f"the inbox is busy (another writer held it for {_busy_ms(conn)} ms)") from exc
            try:
                if guarded:
                    _refuse_if_marked(conn)
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite may already have rolled back (e.g. SQLITE_FULL)
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except apsw.Error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            if relaxed:
                conn.execute("PRAGMA synchronous=FULL")
    except _RUN_TIME_ERRORS as exc:
        if not translated:
            raise
        raise _unavailable(exc) from exc


def _refuse_if_marked(conn: apsw.Connection) -> None:
    try:
        rows = conn.execute(MOVE_MARK).fetchall()
    except apsw.SQLError:  # no move_mark table: a file built to an older schema (tests build them)
        return
    if rows:
        raise move_refusal(*rows[0])


class _TranslatedErrors(AbstractContextManager[None]):
    """translate_errors' context: a class, not a generator, as it wraps every ingest (a third of the cost to
    enter and leave)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        if isinstance(exc, _RUN_TIME_ERRORS):
            raise _unavailable(exc) from exc


_TRANSLATED_ERRORS = _TranslatedErrors()


def translate_errors() -> AbstractContextManager[None]:
    """Turn the SQLite errors a caller can meet at run time into StoreUnavailable (pg.PgBackend has its own)."""
    return _TRANSLATED_ERRORS


_RUN_TIME_ERRORS = (apsw.FullError, apsw.BusyError, apsw.IOError, apsw.ReadOnlyError)


def _unavailable(exc: apsw.Error) -> StoreUnavailable:
    if isinstance(exc, apsw.FullError):
        return StoreUnavailable("the inbox file or its disk is full")
    if isinstance(exc, apsw.BusyError):
        return StoreUnavailable("the inbox is busy")
    return StoreUnavailable(f"the inbox cannot be written: {exc}")


def schema_dump(conn: apsw.Connection) -> list[tuple[str, str, str]]:
    """The schema as (type, name, normalised sql), for comparing a fresh file with a migrated one."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name"
    ).fetchall()
    return [(t, n, " ".join(str(s).split())) for t, n, s in rows]
