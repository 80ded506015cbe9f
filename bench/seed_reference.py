"""The seeds' reference: the inbox, lease and claim of the article this project grew from (the seeds' "inbox.py":
Python's sqlite3, one file, WAL), as the store benchmark's fifth system.

Only what the benchmark's lines call is here (connect, ingest, acquire, claim_batch, finish), kept as the article
wrote it: the same schema, the same statements, the same transactions. Its durability is the library's: WAL with
synchronous left at the stdlib SQLite's default (FULL for WAL here; the benchmark reads it back and prints it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

MAX_ATTEMPTS = 3  # claims before an event is parked as dead
LEASE_TTL = 120  # seconds a worker owns the inbox without renewing

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    payload TEXT,
    status TEXT NOT NULL DEFAULT 'pending', -- pending | running | done | dead
    attempts INTEGER NOT NULL DEFAULT 0,
    claim_gen INTEGER, -- lease generation that claimed it
    error TEXT,
    UNIQUE (source, source_id)
);
CREATE TABLE IF NOT EXISTS lease (
    one INTEGER PRIMARY KEY CHECK (one = 1), -- a single row
    holder TEXT NOT NULL,
    gen INTEGER NOT NULL, -- +1 on every takeover
    until INTEGER NOT NULL
);
"""


def connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # transactions are explicit
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    return db


@contextmanager
def tx(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that always ends: COMMIT on success, ROLLBACK on error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def ingest(db: sqlite3.Connection, source: str, source_id: str, payload: Any) -> bool:
    """Store an event. Returns False for a duplicate delivery: the event is stored once."""
    cur = db.execute(
        "INSERT OR IGNORE INTO inbox (source, source_id, payload) VALUES (?, ?, ?)",
        (source, source_id, json.dumps(payload)))
    return cur.rowcount == 1


def acquire(db: sqlite3.Connection, holder: str, now: int) -> int | None:
    """Take or renew the lease. Returns the generation, or None if someone else holds it."""
    with tx(db):
        row = db.execute("SELECT holder, gen, until FROM lease").fetchone()
        if row is None:
            gen = 1
        elif row[0] == holder and row[2] >= now:
            gen = row[1]  # renewal
        elif row[2] < now:
            gen = row[1] + 1  # takeover of an expired lease
        else:
            return None  # held by someone else
        db.execute("INSERT OR REPLACE INTO lease VALUES (1, ?, ?, ?)", (holder, gen, now + LEASE_TTL))
        return int(gen)


def _holds(db: sqlite3.Connection, holder: str, gen: int, now: int) -> bool:
    row = db.execute("SELECT holder, gen, until FROM lease").fetchone()
    return row is not None and row[:2] == (holder, gen) and row[2] >= now


def claim_batch(db: sqlite3.Connection, holder: str, gen: int, now: int) -> list[Any]:
    """Claim work for one run (the article's: lost rows back to pending, poison parked, a retry alone)."""
    with tx(db):
        if not _holds(db, holder, gen, now):
            return []
        db.execute("""UPDATE inbox SET status = 'pending'
                      WHERE status = 'running' AND claim_gen < ?""", (gen,))
        db.execute("""UPDATE inbox SET status = 'dead', error = 'too many attempts'
                      WHERE status = 'pending' AND attempts >= ?""", (MAX_ATTEMPTS,))
        retry = db.execute("""SELECT id FROM inbox WHERE status = 'pending'
                              AND attempts > 0 ORDER BY id LIMIT 1""").fetchone()
        where = "id = ?" if retry else "status = 'pending'"
        rows = db.execute(
            f"""UPDATE inbox SET status = 'running', attempts = attempts + 1,
                claim_gen = ? WHERE {where}
                RETURNING id, source, source_id, payload""",
            (gen, *retry) if retry else (gen,)).fetchall()
        return sorted(rows)  # RETURNING order is arbitrary


def finish(db: sqlite3.Connection, holder: str, gen: int, now: int, ids: Sequence[int],
           error: str | None = None) -> bool:
    """Record a run's outcome in one fenced transaction (the article's, without the outbox's messages)."""
    with tx(db):
        if not _holds(db, holder, gen, now):
            return False
        status = "pending" if error else "done"
        for i in ids:
            db.execute("""UPDATE inbox SET status = ?, error = ?
                          WHERE id = ? AND status = 'running' AND claim_gen = ?""",
                       (status, error, i, gen))
        return True
