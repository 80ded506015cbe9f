"""Copying a whole inbox from one store into a new, empty one (`agent-console migrate`): a SQLite file
into a PostgreSQL schema, or between any two backends.

Everything is copied with its ids (events, their history, timers, approvals with their sessions, the
journal, the outbox with its batches and deliveries, memory, the lease and its log, spend, phone
records, the inbox's identity tag, which the phone answer keys are derived from), in one transaction
on the target, read from one snapshot of the source: the copy is all there or not at all. The kept
counts are not copied: the target's triggers count what arrives, and the verification compares them
and every table's rows with the source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from console.core.db import StoreError, transaction
from console.core.store import Store

# In the order the foreign keys need (batches before the messages and deliveries that name them).
TABLES: tuple[str, ...] = (
    "inbox", "attempts", "lease", "lease_log", "refused_finishes", "timers", "approvals", "sessions",
    "outbox_batches", "outbox", "outbox_deliveries", "journal", "agent_state", "replay_ledger", "memory",
    "tool_calls", "spend", "budgets", "inbox_identity", "phone_messages", "phone_cursors", "phone_answers",
)
# Tables a new inbox is created with one row in: the copy replaces that row.
SEEDED = ("agent_state", "inbox_identity")
# What decides that a target is not new: any of these holds a row.
CONTENT = ("inbox", "timers", "approvals", "outbox", "journal", "memory", "spend", "lease")
CHUNK = 2_000


@dataclass(frozen=True)
class CopyReport:
    rows: dict[str, int]  # table -> rows copied (equal on both sides: verified)

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _columns(store: Store, table: str) -> list[str]:
    if store.backend == "postgresql":
        rows = store.connection.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ? ORDER BY ordinal_position", (table,)
        ).fetchall()
    else:
        rows = [(row[1],) for row in store.connection.execute(f"PRAGMA table_info({table})")]
    return [str(name) for (name,) in rows]


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


def copy_inbox(source: Store, target: Store, *, now: int,
               progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy every row of source into target (which must be new), then verify every table's count and the
    kept status counts. Raises StoreError naming what differs; on any failure the target keeps nothing."""
    refuse_live_source(source, now)
    refuse_unless_new(target)
    copied: dict[str, int] = {}
    with _snapshot(source), transaction(target.connection):
        for table in TABLES:
            columns = [c for c in _columns(source, table) if c in set(_columns(target, table))]
            if table in SEEDED:
                target.connection.execute(f"DELETE FROM {table}")
            names = ", ".join(columns)
            marks = ", ".join("?" for _ in columns)
            insert = f"INSERT INTO {table} ({names}) VALUES ({marks})"
            moved = 0
            for chunk in _chunks(source.connection.execute(f"SELECT {names} FROM {table}")):
                target.connection.executemany(insert, chunk)
                moved += len(chunk)
            copied[table] = moved
            if progress is not None:
                progress(table, moved)
        _advance_identities(target)
        report = CopyReport(copied)
        _verify(source, target, report)
    return report


def _chunks(rows: Any) -> Any:
    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(tuple(row))
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@contextmanager
def _snapshot(store: Store) -> Iterator[None]:
    """One read transaction on the source, so every table is read as of the same moment."""
    begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if store.backend == "postgresql" else "BEGIN"
    store.connection.execute(begin)
    try:
        yield
    finally:
        store.connection.execute("COMMIT")


def _advance_identities(target: Store) -> None:
    """Ids were copied as they were: the target's own counters must continue after the highest."""
    if target.backend != "postgresql":
        return
    for table in TABLES:
        sequence = target.connection.execute(
            "SELECT pg_get_serial_sequence(?, 'id')", (table,)
        ).fetchall() if "id" in _columns(target, table) else [(None,)]
        if sequence[0][0] is not None:
            target.connection.execute(
                f"SELECT setval(?, COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)", (sequence[0][0],)
            )


def _verify(source: Store, target: Store, report: CopyReport) -> None:
    differ = [f"{table}: {_count(source, table)} in the source, {_count(target, table)} copied"
              for table in TABLES if _count(source, table) != _count(target, table)]
    if source.counts() != target.counts():
        differ.append(f"event counts: {source.counts()} in the source, {target.counts()} in the copy")
    if source.outbox_counts() != target.outbox_counts():
        differ.append(f"outbox counts: {source.outbox_counts()} in the source, {target.outbox_counts()} in the copy")
    if differ:
        raise StoreError("the copy does not match its source, nothing was kept: " + "; ".join(differ))
