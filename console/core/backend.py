"""What the Store needs of the storage under it: the Backend protocol.

The Store and its mixins are backend-neutral: they run the core's SQL (written once, in the portable subset
SQLite and PostgreSQL share) on `Backend.conn`, and ask the Backend for everything that is the storage's own:
a write transaction (how writers are serialised, durability relaxed for the commits that may lose it, the
engine's run-time errors turned into StoreUnavailable), the change feed, the facts about the storage (its
schema, version, size, integrity, plans), and how a batch is written (SQLite: a cheap statement a row;
PostgreSQL, where a statement is a round trip: one statement for the whole set). `core/sqlite.py` and
`core/pg.py` implement it; `store.open_store()` is the one place that picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

# One line of an event's history: (event_id, at, kind, holder, gen, detail), the columns of `attempts`.
AttemptEntry = tuple[int, int, str, str | None, int | None, str | None]
# An inbox's part in a move: (state, the other inbox's name, since) (statements.MOVE_MARK).
MoveMark = tuple[str, str, int]

# SQLite's: the size the WAL is cut back to once a checkpoint has emptied it (PRAGMA journal_size_limit). A long
# reader makes the WAL grow without bound while it reads (its snapshot keeps every later frame); without
# a limit the file keeps that size for ever.
WAL_SIZE_LIMIT = 4 * 1024 * 1024


@dataclass(frozen=True)
class QuickCheck:
    """What a bounded quick check found: problems (empty when none), and whether it read the whole file
    (finished) or stopped at its time bound with that much of the file unread, in seconds taken."""

    problems: list[str]
    finished: bool
    seconds: float


class Rows(Protocol):
    """A statement's result: an apsw cursor, or pg's rows read at once."""

    def __iter__(self) -> Iterator[Any]: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """What the core's SQL runs on: an apsw connection, or a pg.PgConnection (which speaks the same)."""

    def execute(self, statements: str, bindings: Any = None, /) -> Rows: ...

    def executemany(self, statements: str, sequenceofbindings: Any, /) -> object: ...

    def changes(self) -> int: ...

    def close(self) -> None: ...


class ChangeFeed(Protocol):
    # How long one wait may last and stop() still be prompt: a feed whose close() ends a wait under way allows
    # long waits (both backends', on Linux); one whose close() waits for the wait to end, short ones.
    longest_wait: float

    def wait(self, timeout: float) -> bool:
        """True when a commit happened (or may have gone unseen) within timeout seconds."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    """One open connection to one inbox's storage, and what the Store asks of that storage."""

    @property
    def name(self) -> str:
        """Which engine holds the inbox: "sqlite" or "postgresql"."""
        ...

    @property
    def path(self) -> str:
        """How the inbox is named to the user: the file's path, or the URL without its password."""
        ...

    @property
    def conn(self) -> Connection: ...

    def reopen(self) -> Backend:
        """Another connection to the same inbox (for another thread)."""
        ...

    def close(self) -> None: ...

    # --- writing ------------------------------------------------------------------------------
    def transaction(self, *, guarded: bool = True, relaxed: bool = False) -> AbstractContextManager[object]:
        """A write transaction that always ends (COMMIT, or ROLLBACK on any error), writers serialised at its
        start. guarded: the inbox's move mark is read first, inside the writers' lock, and its MoveRefusal
        raised. relaxed: its commit does not wait for the disk (see db.transaction's promise). The storage's
        errors come out as they are (a move's copy names them itself)."""
        ...

    def write_transaction(self, *, guarded: bool = True, relaxed: bool = False) -> AbstractContextManager[object]:
        """transaction(), with the storage's run-time errors as StoreUnavailable (as storage_errors): the Store's."""
        ...

    def storage_errors(self) -> AbstractContextManager[None]:
        """The storage's run-time errors (busy, full, a server gone) as StoreUnavailable."""
        ...

    # --- the change feed ----------------------------------------------------------------------
    def change_feed(self) -> ChangeFeed: ...

    def data_version(self) -> int:
        """Changes when another connection commits (it may change spare; it never misses a commit)."""
        ...

    # --- facts about the storage --------------------------------------------------------------
    def move_mark(self) -> tuple[str, str, int] | None: ...

    def schema(self) -> list[tuple[str, str, str]]: ...

    def schema_version(self) -> int: ...

    def integrity_check(self) -> str: ...

    def integrity_problems(self) -> list[str]: ...

    def intake_check(self, *, seconds: float, probe_write: bool = True) -> QuickCheck: ...

    def wal_bytes(self) -> int: ...

    def shrink_wal(self) -> bool: ...

    def page_count(self) -> int: ...

    def limit_pages(self, pages: int) -> int: ...

    def query_plan(self, sql: str, params: Any = ()) -> list[str]: ...

    def durability_settings(self) -> dict[str, str]: ...

    # --- the usual ingest, claim and finish: done whole by the backend, or declined ---------------------------------
    # Each does the whole operation, fenced and committed, or declines (None / False) having written nothing; the
    # Store then runs the shared path (the same steps as the core's statements, in its own write transaction). A
    # backend takes the cases where it has a cheaper way (PostgreSQL: one round trip instead of four to eight;
    # SQLite: an ingest's read and insert in one snapshot) and declines the rest. The Store calls them only when no
    # refused copies are held to write (those go in the shared path's transaction).
    def try_ingest(
        self, source: str, source_id: str, encode: Callable[[], str], now: int
    ) -> tuple[bool, MoveMark | None] | None:
        """Store one event (its payload text from encode, which may raise ValueError) unless its key is stored or
        the inbox carries a move mark: (whether it was stored, the mark). A refused copy is not counted (the Store
        holds its count). None: declined, nothing written."""
        ...

    def try_ingest_many(
        self, encoded: Sequence[tuple[str, str, str]], now: int, *, traces: Mapping[tuple[str, str], str] | None = None
    ) -> tuple[list[bool], MoveMark | None] | None:
        """Store many events in one durable transaction unless the inbox carries a move mark: (for each, whether
        it was new; a copy is counted on its stored row, as insert_events; a new one keeps its trace context from
        traces, by key), the mark. None: declined."""
        ...

    def try_claim(self, holder: str, gen: int, now: int, cap: int) -> list[Any] | None:
        """Claim fresh events (their rows, statements.EVENT_COLUMNS; each with a `claim` history line) when
        (holder, gen) holds the lease and nothing else waits to be seen to first (a lost run, a retry, a move mark).
        None: declined, nothing written."""
        ...

    def try_finish(self, holder: str, gen: int, ids: Sequence[int], now: int) -> bool:
        """Finish a run that succeeded and staged nothing (its events done, a `finish` history line each), fenced by
        the lease. False: declined (nothing written: the shared path runs, records a refusal and says why)."""
        ...

    # --- a batch, inside the caller's fenced transaction -----------------------------------------
    def insert_events(self, encoded: Sequence[tuple[str, str, str]], now: int) -> list[bool]:
        """Insert each (source, source_id, payload text) or count a refused copy, in order: True when new."""
        ...

    def claim_fresh(self, gen: int, now: int, cap: int) -> list[Any]:
        """Claim up to cap fresh events (never tried, not set to run alone); their rows (statements.EVENT_COLUMNS)."""
        ...

    def finish_done(self, ids: Sequence[int], gen: int, now: int) -> set[int]:
        """Mark done those of ids still running under gen; the ids that moved."""
        ...

    def log_attempts(self, entries: Sequence[AttemptEntry]) -> None:
        """Many history lines at once, in order."""
        ...

    def count_refusals(self, held: Sequence[tuple[str, str, int, int]]) -> None:
        """Count refused copies held in memory on their events: (source, source_id, copies, last refused at)."""
        ...

    def claim_fresh_statement(self) -> tuple[str, tuple[int, ...]]:
        """The statement claim_fresh reads its events with, and parameters to plan it with (explain_claim)."""
        ...

    # --- moving a whole inbox (copy.py) ---------------------------------------------------------
    @property
    def location(self) -> str:
        """How a move names the inbox in its marks and lines: a file's absolute path, a URL without password."""
        ...

    def tables(self) -> set[str]:
        """The names of the inbox's tables."""
        ...

    def columns(self, table: str) -> list[str]:
        """A table's columns, in order."""
        ...

    def begin_snapshot(self) -> None:
        """Begin a read transaction that sees every table as of one moment (ended by COMMIT or ROLLBACK)."""
        ...

    def lift_idle_limit(self) -> None:
        """Let the open transaction sit idle between statements (a copy waits on the other side)."""
        ...

    def bulk_insert(self, table: str, columns: Sequence[str], chunks: Iterable[list[tuple[Any, ...]]]) -> int:
        """Insert every row of chunks into table (columns in order), inside the open transaction; how many."""
        ...

    def pause_counting(self, counted: Mapping[str, str]) -> None:
        """Before a bulk load inside a transaction: stop keeping the counts (table -> its counts table)."""
        ...

    def recount(self, counted: Mapping[str, str]) -> None:
        """After it: keep counting again, with each counts table set from the rows (pause_counting's end)."""
        ...

    def advance_identities(self, tables: Sequence[str]) -> None:
        """Rows were loaded with their ids: the tables' own id counters continue after the highest."""
        ...
