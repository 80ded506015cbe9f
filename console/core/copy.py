"""Moving a whole inbox from one store into a new one (`agent-console migrate`): a SQLite file into a
PostgreSQL schema, or between any two backends.

Everything is copied with its ids (events, their history, timers, approvals with their sessions, the
journal, the outbox with its batches and deliveries, memory, the lease and its log, spend, phone
records, the inbox's identity tag, which the phone answer keys are derived from), in one transaction
on the target, read from one snapshot of the source. The kept counts are not copied: the target's
triggers count what arrives, and the verification compares them and every table's rows with the source.

A move loses nothing acknowledged because both inboxes carry a mark (the move_mark row) that every write
transaction reads first (db.transaction): in order,
1. the target is marked `incomplete` (a copy from the source): nothing opens it for work;
2. the source is marked `moving` to the target, in a write transaction that also refuses a live lease:
   every write after it is refused (a webhook gets 503 + Retry-After, a CLI write exits 2, a worker waits);
   every write before it is in the copy's snapshot, which is taken after it;
3. the copy, in one target transaction, checked table by table;
4. the source is marked `moved` to the target, in one write transaction that first checks that every
   event key of the source is in the target (nothing can commit to the source in between);
5. the target's mark is cleared: it is a working inbox.
A failure clears the source's `moving` mark (the source takes work again) and leaves the target marked
incomplete; run at any point again, `migrate` restarts the copy (2-3) or finishes the move (4-5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from console.core.errors import MoveRefusal, StoreError, StoreUnavailable, move_refusal
from console.core.store import Store

# In the order the foreign keys need (batches before the messages and deliveries that name them).
TABLES: tuple[str, ...] = (
    "inbox", "attempts", "lease", "lease_log", "refused_finishes", "timers", "approvals", "sessions",
    "outbox_batches", "outbox", "outbox_deliveries", "journal", "agent_state", "replay_ledger", "memory",
    "tool_calls", "spend", "budgets", "inbox_identity", "phone_messages", "phone_pieces", "phone_cursors",
    "phone_answers",
    "cap_uses", "cap_notices", "held_messages", "audit", "audit_head", "spend_accepted", "chat_pairings",
    "chat_pair_codes", "chat_strangers", "chat_health", "chat_updates",
    "tool_health", "receiver_counts", "model_health", "schedules",
)
# Tables not copied: kept counts (the target's own triggers or the copy count them), the move's own marks, and
# PostgreSQL's schema version (the target has its own). Any other table a migration adds must join TABLES:
# a move refuses to start while one is neither here nor there, rather than leave its rows behind.
NOT_COPIED = ("inbox_counts", "outbox_counts", "move_mark", "schema_version")
# Tables a new inbox is created with one row in: the copy replaces that row.
SEEDED = ("agent_state", "inbox_identity", "audit_head")
# What decides that a target is not new: any of these holds a row.
CONTENT = ("inbox", "timers", "approvals", "outbox", "journal", "memory", "spend", "lease")
CHUNK = 2_000
KEYS_PAGE = 20_000  # event keys compared per query at the end


class MoveFailed(StoreError):
    """The move stopped (a side's disk is full, its server went away, the copy does not match): one line
    naming the side and what happened; the source takes work again unless the line says otherwise."""


@dataclass(frozen=True)
class CopyReport:
    rows: dict[str, int]  # table -> rows copied (equal on both sides: verified); empty when nothing was copied
    keys: int  # event keys of the source found in the target at the end
    source: str
    target: str
    how: str = "copied"  # copied | restarted (an unfinished copy was done again) | finished | already moved

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def inbox_name(store: Store) -> str:
    """How a move names an inbox in its marks and lines: a file's absolute path, a URL without password."""
    return store.storage.location


def _columns(store: Store, table: str) -> list[str]:
    return store.storage.columns(table)


def _count(store: Store, table: str) -> int:
    return int(store.connection.execute(f"SELECT COUNT(*) FROM {table}").fetchall()[0][0])


def refuse_unless_new(target: Store) -> None:
    held = {table: n for table in CONTENT if (n := _count(target, table))}
    if held:
        what = ", ".join(f"{n} {table}" for table, n in held.items())
        raise StoreError(f"the target inbox {target.path} is not empty ({what}): migrate into a new inbox "
                         "(another schema or database)")


def refuse_live_source(source: Store, now: int) -> None:
    lease = source.lease()
    if lease is not None and lease.until >= now:
        raise StoreError(f"an engine holds the source inbox's lease ({lease.holder}, generation {lease.gen}, "
                         f"for {lease.until - now} s more): stop it first, so nothing changes while it is copied")


@contextmanager
def _side(what: str) -> Iterator[None]:
    """A database error on one side of the move (disk full, connection lost, server gone) as one line that
    names the side. StoreErrors (the Store's own lines) pass as they are."""
    try:
        yield
    except (MoveFailed, MoveRefusal):
        raise
    except StoreUnavailable as exc:  # a lost connection, a busy or full file: the Store's line names no side
        raise MoveFailed(f"{what} failed: {exc}") from exc
    except StoreError:
        raise
    except UnicodeDecodeError as exc:  # a text value whose bytes are not UTF-8 any more: the file is damaged
        raise MoveFailed(f"{what} failed: a stored text is not UTF-8 ({exc.reason} at byte {exc.start}): the "
                         "inbox is damaged, see `agent-console check`") from exc
    except Exception as exc:
        if not type(exc).__module__.startswith(("apsw", "psycopg")):
            raise
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise MoveFailed(f"{what} failed: {first}") from exc


def move_inbox(source: Store, target: Store, *, now: int,
               progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Move source into target (new, or an unfinished copy of this source), as the module's docstring says.
    Raises StoreError (one line) when it cannot; the source then takes work again unless the line says it
    is still marked."""
    source_name, target_name = inbox_name(source), inbox_name(target)
    with _side(f"reading the source {source_name}"):
        source_mark = source.move_mark()
    with _side(f"reading the target {target_name}"):
        target_mark = target.move_mark()
    if source_mark is not None and source_mark[0] == "moved":
        if source_mark[1] != target_name:
            raise StoreError(f"the source {source_name} was already moved to {source_mark[1]}: migrate from there "
                             f"(or take the move back with agent-console migrate --abandon --from {source_name})")
        return _finish_move(source, target, source_name, target_name, target_mark, now)
    if source_mark is not None and source_mark[0] == "incomplete":
        raise StoreError(f"the source {source_name}: {move_refusal(*source_mark)}")
    if source_mark is not None and source_mark[1] != target_name:
        raise StoreError(f"the source {source_name} is being moved to {source_mark[1]} by another migrate: if that "
                         f"one is no longer running, agent-console migrate --abandon --from {source_name} first")
    _refuse_unknown_tables(source, source_name)
    restart = _check_target(target, target_name, target_mark, source_name)
    refuse_live_source(source, now)
    with _side(f"marking the target {target_name}"):
        _set_mark(target, "incomplete", source_name, now)
    with _side(f"marking the source {source_name}"), source.storage.transaction(guarded=False):
        refuse_live_source(source, now)  # again, inside the mark's own write lock: no engine starts meanwhile
        _write_mark(source, "moving", target_name, now)
    try:
        rows = _copy(source, target, source_name, target_name, restart, progress)
        keys = _finish_source(source, target, source_name, target_name, now)
    except BaseException as exc:
        kept = _unmark_source(source, target_name)
        if kept is None or not isinstance(exc, Exception):
            raise
        raise MoveFailed(f"{' '.join(str(exc).split())}; {kept}") from exc
    _finish_target(target, target_name)
    return CopyReport(rows, keys, source_name, target_name, "restarted" if restart else "copied")


def _refuse_unknown_tables(source: Store, source_name: str) -> None:
    with _side(f"reading the source {source_name}"):
        names = source.storage.tables()
    unknown = sorted(names - set(TABLES) - set(NOT_COPIED))
    if unknown:
        raise StoreError(f"this agent-console does not know how to move the table(s) {', '.join(unknown)} of "
                         f"{source_name} (a bug: report it); nothing was changed")


def _check_target(target: Store, target_name: str, mark: tuple[str, str, int] | None, source_name: str) -> bool:
    """Whether the target is an unfinished copy of this source (to be done again); refuses any other
    target that is not new."""
    if mark is None:
        with _side(f"reading the target {target_name}"):
            refuse_unless_new(target)
        return False
    if mark[0] == "incomplete" and mark[1] == source_name:
        return True
    if mark[0] == "incomplete":
        raise StoreError(f"the target {target_name} is an unfinished copy from {mark[1]}, not from {source_name}: "
                         "delete it, or migrate from there again")
    raise StoreError(f"the target {target_name}: {move_refusal(*mark)}")


def _copy(source: Store, target: Store, source_name: str, target_name: str, restart: bool,
          progress: Callable[[str, int], None] | None) -> dict[str, int]:
    copied: dict[str, int] = {}
    into = f"writing the target {target_name}"
    with _side(into), target.storage.transaction(guarded=False), _snapshot(source, source_name):
        target.storage.lift_idle_limit()
        target.storage.pause_counting(COUNTED)
        if restart:
            for table in reversed(TABLES):  # children before the rows they name
                target.connection.execute(f"DELETE FROM {table}")
        for table in TABLES:
            with _side(f"reading the source {source_name}"):
                source_columns = _columns(source, table)
            columns = [c for c in source_columns if c in set(_columns(target, table))]
            if table in SEEDED:
                target.connection.execute(f"DELETE FROM {table}")
            copied[table] = _copy_table(source, target, table, columns, source_name)
            if progress is not None:
                progress(table, copied[table])
        target.storage.advance_identities(TABLES)
        target.storage.recount(COUNTED)
        with _side(f"reading the source {source_name}"):
            _verify(source, target, copied)
    return copied


def _copy_table(source: Store, target: Store, table: str, columns: list[str], source_name: str) -> int:
    """Copy one table's rows; how many (the target's bulk load: PostgreSQL's COPY, SQLite's prepared inserts)."""
    rows = _chunks(source, f"SELECT {', '.join(columns)} FROM {table}", source_name)
    return target.storage.bulk_insert(table, columns, rows)


def _finish_source(source: Store, target: Store, source_name: str, target_name: str, now: int) -> int:
    """Mark the source moved, in one write transaction that first finds every event key of the source in
    the target: nothing can commit to the source between the check and the mark."""
    with _side(f"marking the source {source_name} moved"), source.storage.transaction(guarded=False):
        mark = source.move_mark()
        if mark is None or mark[:2] != ("moving", target_name):
            raise MoveFailed(f"the source {source_name} is no longer marked as being moved to {target_name} (the "
                             "move was abandoned meanwhile): nothing is marked moved; run migrate again")
        keys = _verify_keys(source, target, source_name, target_name)
        _write_mark(source, "moved", target_name, now)
    return keys


def _finish_move(source: Store, target: Store, source_name: str, target_name: str,
                 target_mark: tuple[str, str, int] | None, now: int) -> CopyReport:
    """The source is already marked moved to this target: check its keys again, and finish the target if a
    killed migrate left it marked."""
    if target_mark is not None and target_mark[:2] != ("incomplete", source_name):
        raise StoreError(f"the target {target_name}: {move_refusal(*target_mark)}")
    with _side(f"reading the source {source_name}"):
        keys = _verify_keys(source, target, source_name, target_name)
    if target_mark is None:
        return CopyReport({}, keys, source_name, target_name, "already moved")
    _finish_target(target, target_name)
    return CopyReport({}, keys, source_name, target_name, "finished")


def _finish_target(target: Store, target_name: str) -> None:
    with _side(f"marking the target {target_name} complete"), target.storage.transaction(guarded=False):
        target.connection.execute("DELETE FROM move_mark WHERE state = 'incomplete'")


def _unmark_source(source: Store, target_name: str) -> str | None:
    """After a failure: the source takes work again (its `moving` mark is cleared). None when it was cleared
    (or was never set); else what the user must do."""
    try:
        with source.storage.transaction(guarded=False):
            source.connection.execute("DELETE FROM move_mark WHERE state = 'moving' AND other = ?", (target_name,))
    except Exception as exc:
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        return (f"the source is still marked as being moved (clearing the mark failed: {first}): run migrate "
                f"again, or agent-console migrate --abandon --from {inbox_name(source)}")
    return None


def abandon_move(source: Store) -> tuple[str, str]:
    """Clear a source's `moving` or `moved` mark so that it takes work again; returns the mark's (state, other).
    An unfinished copy is not a source: deleting it is the way out."""
    with source.storage.transaction(guarded=False):
        mark = source.move_mark()
        if mark is None:
            raise StoreError(f"{inbox_name(source)} is not being moved, nor was it moved: nothing to abandon")
        if mark[0] == "incomplete":
            raise StoreError(f"{inbox_name(source)} is an unfinished copy from {mark[1]}, not a source: run migrate "
                             "again or delete it")
        source.connection.execute("DELETE FROM move_mark")
    return mark[0], mark[1]


def _set_mark(store: Store, state: str, other: str, now: int) -> None:
    with store.storage.transaction(guarded=False):
        _write_mark(store, state, other, now)


def _write_mark(store: Store, state: str, other: str, now: int) -> None:
    store.connection.execute(
        "INSERT INTO move_mark (one, state, other, at) VALUES (1, ?, ?, ?) ON CONFLICT (one) DO UPDATE "
        "SET state = excluded.state, other = excluded.other, at = excluded.at", (state, other, now))


def _chunks(store: Store, sql: str, name: str) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of a query on the source, CHUNK at a time; its errors name the source."""
    with _side(f"reading the source {name}"):
        rows = iter(store.connection.execute(sql))
    while True:
        with _side(f"reading the source {name}"):
            chunk = [tuple(row) for _, row in zip(range(CHUNK), rows, strict=False)]
        if not chunk:
            return
        yield chunk


@contextmanager
def _snapshot(store: Store, name: str) -> Iterator[None]:
    """One read transaction on the source, so every table is read as of the same moment (a copy's transactions
    wait on the other side between statements: the storage's limit on an idle transaction is lifted)."""
    with _side(f"reading the source {name}"):
        store.storage.begin_snapshot()
        store.storage.lift_idle_limit()
    try:
        yield
    except BaseException:
        with suppress(Exception):  # the source may be gone: the error that stopped the copy is the one to say
            store.connection.execute("ROLLBACK")
        raise
    with _side(f"reading the source {name}"):
        store.connection.execute("COMMIT")


# The tables whose rows are counted, and where the counts are kept: a backend whose triggers would update the
# counts row once a row copied may pause them for the copy and count each table once at its end.
COUNTED = {"inbox": "inbox_counts", "outbox": "outbox_counts"}


def _verify(source: Store, target: Store, copied: dict[str, int]) -> None:
    differ = [f"{table}: {_count(source, table)} in the source, {_count(target, table)} copied"
              for table in TABLES if _count(source, table) != _count(target, table)]
    if source.counts() != target.counts():
        differ.append(f"event counts: {source.counts()} in the source, {target.counts()} in the copy")
    if source.outbox_counts() != target.outbox_counts():
        differ.append(f"outbox counts: {source.outbox_counts()} in the source, {target.outbox_counts()} in the copy")
    if differ:
        raise MoveFailed("the copy does not match its source, nothing was kept: " + "; ".join(differ))


_KEYS = "SELECT id, source, source_id FROM inbox WHERE id > ? ORDER BY id LIMIT ?"
_KEYS_UPTO = "SELECT id, source, source_id FROM inbox WHERE id > ? AND id <= ? ORDER BY id"


def _verify_keys(source: Store, target: Store, source_name: str, target_name: str) -> int:
    """Every event of the source (its id and its key) is in the target; returns how many. Read a page of ids
    at a time on both sides (ids were copied as they were), so it costs two indexed reads per page."""
    after, checked = 0, 0
    while True:
        with _side(f"reading the source {source_name}"):
            page = [tuple(row) for row in source.connection.execute(_KEYS, (after, KEYS_PAGE))]
        if not page:
            return checked
        with _side(f"reading the target {target_name}"):
            there = [tuple(row) for row in target.connection.execute(_KEYS_UPTO, (after, page[-1][0]))]
        if page != there:
            missing = sorted(set(page) - set(there))
            first = f" (the first: {missing[0][1]} {missing[0][2]})" if missing else ""
            raise MoveFailed(f"{len(missing)} event(s) of the source {source_name} are not in the target "
                             f"{target_name}{first}: nothing is marked moved; run migrate again")
        checked += len(page)
        after = int(page[-1][0])
