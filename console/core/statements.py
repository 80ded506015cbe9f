"""The inbox's hot-path statements, written once: what the Store runs and what each Backend builds its own batch
forms from (SQLite's statement a row, PostgreSQL's statement a set). Backends import these names and nothing
private of the Store's.

How an event is stored, claimed and finished is here, for both engines; PostgreSQL's one-round-trip forms of the
usual case are PL/pgSQL functions (pg_schema 0013, 0014, 0017, 0020, 0021, 0027) that do the same steps, and
tests/core/test_hot_path_parity.py runs every operation with them on and off and compares the rows they leave.
A change here that the functions must follow (a column an insert sets, a claim's or a finish's SET) is a
migration there too: the parity test fails until it is.
"""

from __future__ import annotations

import zlib

# Every column of an event, in the order the Store's row decoder reads them (base.event_from_row). PostgreSQL's
# claim function returns whole inbox rows and its caller picks these from them, so a new column is added here only.
EVENT_FIELDS = (
    "id", "source", "source_id", "payload", "status", "attempts", "claim_gen", "error",
    "created_at", "updated_at", "next_attempt_at", "duplicates", "pruned_at", "dead_reason", "trace", "failed_with",
    "payload_crc32",
)
# The payload is read as the bytes stored (SQLite): their checksum is taken on them as they are, and bytes that are
# not UTF-8 any more (damage) are an event found damaged, not an error out of the driver that stops the whole read.
# PostgreSQL, which checks text on its way in, reads the text (pg.translate).
PAYLOAD_AS_STORED = "CAST(payload AS BLOB) AS payload"
EVENT_COLUMNS = ", ".join(PAYLOAD_AS_STORED if field == "payload" else field for field in EVENT_FIELDS)

# --- storing an event (intake) -------------------------------------------------------------------------------------
# The columns an insert sets; every way into the inbox (ingest, timers, approval answers, webhook deliveries) writes
# these, a delivery's trace context (telemetry.context_to_keep) or NULL. payload_crc32 is the CRC-32 of the payload's
# UTF-8 bytes (base.payload_checksum), written with it: a read that finds other bytes reports the event damaged.
INSERT_COLUMNS = "source, source_id, payload, payload_crc32, created_at, updated_at, trace"


def payload_checksum(text: str) -> int:
    """What an insert writes in payload_crc32 beside the payload text (both engines store it as UTF-8)."""
    return zlib.crc32(text.encode("utf-8"))


# The duplicate ledger: an insert meeting a stored key counts the copy on the stored row instead.
COUNT_A_COPY = """ON CONFLICT (source, source_id) DO UPDATE
                  SET duplicates = inbox.duplicates + 1, last_duplicate_at = excluded.created_at"""
# The one statement that stores an event a row at a time (PostgreSQL's set form is built from the same parts).
INSERT_EVENT = f"""INSERT INTO inbox ({INSERT_COLUMNS})
                   VALUES (?, ?, ?, ?, ?, ?, ?) {COUNT_A_COPY} RETURNING duplicates"""
# Is a key stored (the read that refuses a redelivery before anything is written).
IS_STORED = "SELECT 1 FROM inbox WHERE source = ? AND source_id = ?"
# Refused copies counted in memory, written to their stored events (inbox.REFUSALS_HELD).
COUNT_REFUSED = """UPDATE inbox SET duplicates = duplicates + ?, last_duplicate_at = ?
                   WHERE source = ? AND source_id = ?"""

# --- the fresh-events index's condition --------------------------------------------------------------------------
# inbox_status_id holds every event but the fresh ones (schema 0028): a durable ingest writes one index fewer, and
# inbox_fresh already holds those, in id order. A read of the status index names NOT_FRESH as a term of its WHERE
# (SQLite uses a partial index only for a query whose terms imply its condition); one that may meet fresh events
# reads them from inbox_fresh too.
FRESH = "status = 'pending' AND attempts = 0 AND claim_alone = 0"
NOT_FRESH = "(status <> 'pending' OR attempts > 0 OR claim_alone = 1)"

# --- claiming (the drain) -------------------------------------------------------------------------------------------
# Named so that Store.explain_claim() shows the plans of exactly what claim_batch runs.
SELECT_LOST = """SELECT id, attempts, claim_gen, updated_at FROM inbox INDEXED BY inbox_running
                 WHERE status = 'running' AND claim_gen < ?"""
SELECT_DUE_RETRY = """SELECT id, attempts FROM inbox INDEXED BY inbox_retry
                      WHERE status = 'pending' AND attempts > 0 AND next_attempt_at <= ?
                      ORDER BY id LIMIT 1"""
SELECT_HAND_RETRY = """SELECT id FROM inbox INDEXED BY inbox_alone
                       WHERE status = 'pending' AND claim_alone = 1 ORDER BY id LIMIT 1"""
# What a claim sets on each event it takes (parameters: the claiming generation, now).
CLAIM_SET = """UPDATE inbox SET status = 'running', attempts = attempts + 1, claim_gen = ?, updated_at = ?,
                claim_alone = 0, failed_with = NULL"""
CLAIM_ONE = f"""{CLAIM_SET} WHERE id = ? RETURNING {EVENT_COLUMNS}"""
# Fresh events are picked from their partial index (the backend claims them: Backend.claim_fresh).
SELECT_FRESH = f"""SELECT id FROM inbox INDEXED BY inbox_fresh WHERE {FRESH} ORDER BY id LIMIT ?"""

# --- finishing -----------------------------------------------------------------------------------------------------
FINISH_ONE = """UPDATE inbox SET status = 'done', error = NULL, updated_at = ?
                WHERE id = ? AND status = 'running' AND claim_gen = ? RETURNING id"""

# --- the usual claim and finish, their checks in one read (SQLite's Backend.try_claim / try_finish) ------------------
# What the shared path reads one statement at a time before it writes (the move mark, the lease, the three probes),
# as one SELECT that answers 1 when the fast path applies: (holder, gen) holds a live lease and no move mark stands
# (parameters: holder, gen, now) ...
LEASE_AND_NO_MARK = """EXISTS (SELECT 1 FROM lease WHERE one = 1 AND holder = ? AND gen = ? AND until >= ?)
                       AND NOT EXISTS (SELECT 1 FROM move_mark)"""
FINISH_APPLIES = f"SELECT {LEASE_AND_NO_MARK}"
# ... and, for a claim, nothing waits to be seen to before fresh events: a run lost by an older generation, a due
# retry, a retry by hand (parameters: holder, gen, now, gen, now).
CLAIM_APPLIES = f"""SELECT {LEASE_AND_NO_MARK} AND NOT EXISTS ({SELECT_LOST}) AND NOT EXISTS ({SELECT_DUE_RETRY})
                    AND NOT EXISTS ({SELECT_HAND_RETRY})"""

# --- a move (`migrate`) -----------------------------------------------------------------------------------------------
# An inbox's part in a move, read first by every write transaction (schema migration 0016).
MOVE_MARK = "SELECT state, other, at FROM move_mark WHERE one = 1"

# --- history -------------------------------------------------------------------------------------------------------
LOG_ATTEMPT = "INSERT INTO attempts (event_id, at, kind, holder, gen, detail) VALUES (?, ?, ?, ?, ?, ?)"
