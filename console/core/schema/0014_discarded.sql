-- A fifth event state, `discarded`: an event the owner gave up on (Sidekiq's and Oban's discard). It is kept
-- for the record (its key still refuses a redelivery, its history stays) and is never claimed again.
--
-- SQLite cannot change a CHECK constraint in place, so the inbox is rebuilt with SQLite's documented
-- twelve-step procedure (https://sqlite.org/lang_altertable.html#otheralter), inside the migration's own
-- transaction. Foreign keys: no table references inbox, so dropping it deletes no child row and
-- foreign_keys can stay on. Every column is copied by name: a column another migration adds to inbox must be
-- added to the three lists below (CREATE TABLE, INSERT, SELECT), or it is lost.
CREATE TABLE inbox_0014 (
    id              INTEGER PRIMARY KEY,
    source          TEXT    NOT NULL,
    source_id       TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'running', 'done', 'dead', 'discarded')),
    attempts        INTEGER NOT NULL DEFAULT 0,   -- counted at claim time
    claim_gen       INTEGER,                      -- lease generation that last claimed it
    error           TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,   -- backoff: a retry is not claimable before this
    duplicates      INTEGER NOT NULL DEFAULT 0,   -- the duplicate ledger: refused copies
    last_duplicate_at INTEGER,
    claim_alone     INTEGER NOT NULL DEFAULT 0,   -- retried by hand: claimed alone
    pruned_at       INTEGER,                      -- when `prune` cleared the payload
    dead_reason     TEXT,                         -- why it died: failed | lost | out_of_attempts (0013)
    UNIQUE (source, source_id)
);
INSERT INTO inbox_0014 (id, source, source_id, payload, status, attempts, claim_gen, error, created_at, updated_at,
                        next_attempt_at, duplicates, last_duplicate_at, claim_alone, pruned_at, dead_reason)
    SELECT id, source, source_id, payload, status, attempts, claim_gen, error, created_at, updated_at,
           next_attempt_at, duplicates, last_duplicate_at, claim_alone, pruned_at, dead_reason
    FROM inbox;
-- Dropping the old table drops its indexes and count triggers with it.
DROP TABLE inbox;
ALTER TABLE inbox_0014 RENAME TO inbox;

-- Every index on inbox, as it stood after 0013 (0001, 0004). 0013's outbox_event is on outbox: untouched.
CREATE INDEX inbox_fresh   ON inbox (id)                   WHERE status = 'pending' AND attempts = 0 AND claim_alone = 0;
CREATE INDEX inbox_retry   ON inbox (next_attempt_at, id)  WHERE status = 'pending' AND attempts > 0;
CREATE INDEX inbox_running ON inbox (claim_gen)            WHERE status = 'running';
CREATE INDEX inbox_alone   ON inbox (id)                   WHERE status = 'pending' AND claim_alone = 1;
CREATE INDEX inbox_status_id ON inbox (status, id);
CREATE INDEX inbox_source_id ON inbox (source, id);

-- The count triggers, as they stood, and the counts recounted once from the rows themselves (whatever the
-- drop did to them), with a row for the new state.
CREATE TRIGGER inbox_count_insert AFTER INSERT ON inbox BEGIN
    UPDATE inbox_counts SET n = n + 1 WHERE status = NEW.status;
END;
CREATE TRIGGER inbox_count_update AFTER UPDATE OF status ON inbox WHEN OLD.status <> NEW.status BEGIN
    UPDATE inbox_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE inbox_counts SET n = n + 1 WHERE status = NEW.status;
END;
CREATE TRIGGER inbox_count_delete AFTER DELETE ON inbox BEGIN
    UPDATE inbox_counts SET n = n - 1 WHERE status = OLD.status;
END;
INSERT INTO inbox_counts (status, n) VALUES ('discarded', 0);
UPDATE inbox_counts SET n = (SELECT COUNT(*) FROM inbox WHERE inbox.status = inbox_counts.status);
