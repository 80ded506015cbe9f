"""The one place that opens SQLite: apsw, pragmas, write transactions and migrations.

Every transaction that may write starts with BEGIN IMMEDIATE, so SQLite serialises writers at the
start of the transaction instead of failing one of them half-way with SQLITE_BUSY on upgrade.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

# Versions 3.7.0 to 3.51.2 carry the WAL-reset corruption bug, which needs two connections on one
# file: exactly how this product runs (the console, the webhook receiver and CLI ingests).
MIN_SQLITE = (3, 51, 3)
BUSY_TIMEOUT_MS = 5000
# Every commit that waits for the disk writes each page it changed to the WAL, and an ingest changes
# five (the row, its key, two indexes, the counts): with 1 KiB pages that is a quarter of the bytes
# to fsync, which measured ~24% faster durable ingests than SQLite's 4 KiB default on this project's
# rows (docs/performance.md). Only a new file takes it; an existing one keeps its size.
NEW_FILE_PAGE_SIZE = 1024

# The size the WAL is cut back to once a checkpoint has emptied it (PRAGMA journal_size_limit). A long
# reader makes the WAL grow without bound while it reads (its snapshot keeps every later frame); without
# a limit the file keeps that size for ever.
WAL_SIZE_LIMIT = 4 * 1024 * 1024
# How much the WAL takes before a commit checkpoints it (PRAGMA wal_autocheckpoint, in pages of the file's size).
# SQLite's default is 1000 pages, whatever their size: 1 MB with our 1 KiB pages, so a checkpoint (an fsync of the
# WAL, the pages copied, an fsync of the file, and the WAL header's own fsync when it starts over) every ~125
# single ingests, four times as often as with 4 KiB pages. By bytes, as with 4 KiB pages, and under WAL_SIZE_LIMIT
# so that a WAL that starts over is never cut and grown again.
WAL_CHECKPOINT_BYTES = 3 * 1024 * 1024

SQLITE_MAGIC = b"SQLite format 3\x00"
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class StoreError(Exception):
    """A problem the user can act on (bad path, not a database, read-only file, old SQLite)."""


class StoreUnavailable(StoreError):
    """The database could not take a write right now (busy for too long, disk or file full)."""


class MoveRefusal(StoreError):
    """The inbox takes no new work because of a move (`agent-console migrate`): every write transaction
    raises it, so every writer (the engine, the receiver, the console, CLI writes) says the same one line."""


class InboxMoving(MoveRefusal, StoreUnavailable):
    """The inbox is being copied: a writer waits and tries again (a webhook gets 503 with Retry-After)."""


class InboxMoved(MoveRefusal):
    """The inbox was moved: its work goes on in the target."""


class InboxIncomplete(MoveRefusal):
    """The inbox is a copy that `migrate` has not finished."""


# An inbox's part in a move, read first by every write transaction (schema migration 0016).
MOVE_MARK = "SELECT state, other, at FROM move_mark WHERE one = 1"
MOVE_STATES = ("moving", "moved", "incomplete")


def move_refusal(state: str, other: str, at: int) -> MoveRefusal:
    """The one line an inbox marked by a move answers every writer with."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    if state == "moving":
        return InboxMoving(f"this inbox is being moved to {other} (agent-console migrate, since {since}): it takes "
                           f"nothing new until the move is done, then use --db {other}; try again later")
    if state == "moved":
        return InboxMoved(f"this inbox was moved to {other} ({since}): it takes no new work; use --db {other}")
    return InboxIncomplete(f"this inbox is an unfinished copy from {other} (agent-console migrate, {since}): "
                           "run migrate again or delete it")


class InboxDamaged(StoreError):
    """The inbox is damaged (its check failed, or a read or write met a damaged page): it takes no new work
    until a backup is restored. The message is one line, the same wherever the damage was found."""


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(target: object) -> bool:
    """A PostgreSQL URL (a str) rather than the path of an inbox file."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


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


def numbered_migrations(folder: str) -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in console/core/<folder>, in order: (number, file name, SQL)."""
    found = []
    for entry in resources.files("console.core").joinpath(folder).iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    numbers = [n for n, _, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise RuntimeError(f"{folder} migrations must be numbered 1..N without gaps, found {numbers}")
    return found


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
) -> apsw.Connection:
    """Open (creating if needed) one inbox file with this project's pragmas and schema.

    check runs quick_check, which reads the whole file: worth it where a long-lived process starts (the
    engine), not for every short command. read_only opens the file as it is, for reading only: it
    never takes the write lock, never creates or migrates the file, and refuses one whose schema is
    not this version's. schema_version stops the migrations at that number (tests use it to build an
    older file). vfs names a registered SQLite VFS: the power-cut tests route every write and fsync
    through one. A VFS written in Python has no shared memory, so that connection holds the file
    exclusively.
    """
    check_sqlite_version()
    target = Path(path).expanduser().absolute()
    _check_path(target, read_only=read_only)
    conn: apsw.Connection | None = None
    try:
        if read_only:
            conn = apsw.Connection(str(target), flags=apsw.SQLITE_OPEN_READONLY)
            _prepare_reader(conn, target, check)
            return conn
        _create_owner_only(target)
        conn = apsw.Connection(str(target), vfs=vfs) if vfs else apsw.Connection(str(target))
        if vfs:
            conn.execute("PRAGMA locking_mode=EXCLUSIVE")  # WAL without shared memory
        _prepare(conn, target, check, SCHEMA_VERSION if schema_version is None else schema_version, migrate)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, apsw.Error):
            raise _open_error(target, exc) from exc
        raise
    return conn


def _prepare(conn: apsw.Connection, target: Path, check: bool, upto: int, migrate: bool) -> None:
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
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


def _prepare_reader(conn: apsw.Connection, target: Path, check: bool) -> None:
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    current = user_version(conn)
    if current > SCHEMA_VERSION:
        raise newer_schema(target, current)
    if current < SCHEMA_VERSION:
        raise older_schema_to_read(target, current)
    if check:
        _refuse_damage(conn, target)


def _refuse_damage(conn: apsw.Connection, target: Path) -> None:
    problems = integrity_problems(conn, quick=True)
    if problems:
        raise InboxDamaged(damage_line(target, problems))


def damage_line(path: str | os.PathLike[str], problems: list[str]) -> str:
    """The one line that says an inbox is damaged: `check`'s first line, and the refusal of every command and
    process that would give it new work."""
    shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
    count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
    return (f"inbox {os.fspath(path)} is damaged: it failed its integrity check ({count}: {shown}); restore a "
            "backup, see docs/reliability.md")


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


# How long the check before intake may read: at the start of a long-lived process (`run`, `serve`, the console),
# and in `ingest`, the one command that acknowledges outside input. SQLite's quick check reads every page (about
# 0.75 s warm, 3 s cold for a 100 MB inbox of ordinary events), so a bound keeps the cost flat in the file's
# size; what a bounded check leaves unread is `agent-console check`'s (docs/reliability.md).
START_CHECK_SECONDS = 2.0
INGEST_CHECK_SECONDS = 0.2
# The check looks at the clock every this many of SQLite's virtual machine steps. Inside the integrity check one
# step can be a page's whole walk (a long overflow chain): every 100 steps overshot a 0.1 s bound by ~0.1 s on
# ~900 KB payloads, every 10 by under 10 ms, at no measurable cost to a whole check.
_CHECK_STEPS = 10
# The page cache a check runs with (KiB). A check reads every page once and never again, so a larger cache only
# holds pages nobody asks for; with the default (2,000 KiB) the engine's writer kept them after its start-up
# check for as long as the process ran (docs/performance.md, "1,000,000 events": peak RSS).
QUICK_CHECK_CACHE_KIB = 128


@dataclass(frozen=True)
class QuickCheck:
    """What a bounded quick check found: problems (empty when none), and whether it read the whole file
    (finished) or stopped at its time bound with that much of the file unread, in seconds taken."""

    problems: list[str]
    finished: bool
    seconds: float


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


def is_damage(exc: BaseException) -> bool:
    """SQLite met a damaged page (SQLITE_CORRUPT) or a file that is no longer a database (SQLITE_NOTADB);
    PostgreSQL reported damaged data or index pages (SQLSTATE XX001, XX002)."""
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError | InboxDamaged):
        return True
    return getattr(exc, "sqlstate", None) in ("XX001", "XX002")


def damage_met(path: str | os.PathLike[str], exc: BaseException) -> InboxDamaged:
    """Damage met while reading or writing (no check ran first): the same one line, naming what was met."""
    if isinstance(exc, InboxDamaged):
        return exc
    return InboxDamaged(damage_line(path, [str(exc)]))


@contextmanager
def reporting_damage(path: str | os.PathLike[str]) -> Iterator[None]:
    """Damage met while reading (no check ran at open) is one line naming the file and what to do."""
    try:
        yield
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise damage_met(path, exc) from exc


def _open_error(target: Path, exc: apsw.Error) -> StoreError:
    if isinstance(exc, apsw.NotADBError):
        return StoreError(f"cannot open inbox {target}: the file is not a SQLite database")
    if isinstance(exc, apsw.ReadOnlyError):
        return StoreError(f"cannot open inbox {target}: the file is read-only")
    if isinstance(exc, apsw.CorruptError):
        return damage_met(target, exc)
    if isinstance(exc, apsw.BusyError):
        return StoreUnavailable(f"cannot open inbox {target}: another process kept it busy for {BUSY_TIMEOUT_MS} ms")
    return StoreError(f"cannot open inbox {target}: {exc}")


def wal_path(path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(path)}-wal")


def shrink_wal(conn: apsw.Connection) -> bool:
    """Checkpoint every frame of the WAL into the file and truncate the WAL to nothing, unless a reader
    still needs its frames. Never waits: a reader or writer in the way makes it return False at once
    (try again later) instead of holding the write lock while it waits for the reader."""
    conn.set_busy_timeout(0)
    try:
        busy, _log_frames, _checkpointed = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
    except apsw.BusyError:
        return False
    finally:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    return not busy


def user_version(conn: apsw.Connection) -> int:
    """The number of the last schema migration applied to this file."""
    return int(conn.execute("PRAGMA user_version").fetchall()[0][0])


def newer_schema(where: str | Path, current: int, known: int = SCHEMA_VERSION) -> StoreError:
    """An inbox migrated by a later agent-console than this one (known: this one's last migration)."""
    return StoreError(
        f"inbox {where} has schema version {current}, newer than this agent-console "
        f"understands ({known}); upgrade agent-console"
    )


def older_schema_to_read(where: str | Path, current: int, known: int = SCHEMA_VERSION) -> StoreError:
    """A command that only reads met an inbox not yet migrated to this agent-console's schema."""
    return StoreError(
        f"inbox {where} has schema version {current}, older than this agent-console's "
        f"({known}), and this command only reads: run a writing command once (`agent-console run`, "
        f"or open the console) to upgrade it"
    )


def _migrate(conn: apsw.Connection, path: Path, upto: int) -> None:
    # Looked at outside a transaction first: a current file (nearly every open) takes no write lock.
    current = user_version(conn)
    if current > SCHEMA_VERSION:
        raise newer_schema(path, current)
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
                raise StoreUnavailable(f"the inbox is busy (another writer held it for {BUSY_TIMEOUT_MS} ms)") from exc
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


def one(conn: Any, sql: str, params: Any = ()) -> Any:
    """The first column of the first row, or None."""
    for row in conn.execute(sql, params):
        return row[0]
    return None


def schema_dump(conn: apsw.Connection) -> list[tuple[str, str, str]]:
    """The schema as (type, name, normalised sql), for comparing a fresh file with a migrated one."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY type, name"
    ).fetchall()
    return [(t, n, " ".join(str(s).split())) for t, n, s in rows]
