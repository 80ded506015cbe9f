-- The inbox: every wake-up of the agent is one row. UNIQUE(source, source_id) refuses a second copy.
CREATE TABLE inbox (
    id              INTEGER PRIMARY KEY,
    source          TEXT    NOT NULL,
    source_id       TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'running', 'done', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,   -- counted at claim time
    claim_gen       INTEGER,                      -- lease generation that last claimed it
    error           TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,   -- backoff: a retry is not claimable before this
    duplicates      INTEGER NOT NULL DEFAULT 0,   -- the duplicate ledger: refused copies
    last_duplicate_at INTEGER,
    UNIQUE (source, source_id)
);
-- Claiming reads only what it claims: fresh events and due retries have their own partial indexes.
CREATE INDEX inbox_fresh   ON inbox (id)                   WHERE status = 'pending' AND attempts = 0;
CREATE INDEX inbox_retry   ON inbox (next_attempt_at, id)  WHERE status = 'pending' AND attempts > 0;
CREATE INDEX inbox_running ON inbox (claim_gen)            WHERE status = 'running';
-- The console pages by id within a status or a source.
CREATE INDEX inbox_status_id ON inbox (status, id);
CREATE INDEX inbox_source_id ON inbox (source, id);

-- Counts by status kept by triggers, so status() is O(1) on a file with millions of events.
CREATE TABLE inbox_counts (
    status TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO inbox_counts (status, n) VALUES ('pending', 0), ('running', 0), ('done', 0), ('dead', 0);
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

-- What happened to each event, for the detail view: claim, finish, error, lost, dead, retry, refusal.
CREATE TABLE attempts (
    id       INTEGER PRIMARY KEY,
    event_id INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    kind     TEXT    NOT NULL,
    holder   TEXT,
    gen      INTEGER,
    detail   TEXT
);
CREATE INDEX attempts_event ON attempts (event_id, id);

-- One row: who owns the inbox until when. The generation goes up on every takeover.
CREATE TABLE lease (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    holder      TEXT    NOT NULL,
    gen         INTEGER NOT NULL,
    until       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    renewed_at  INTEGER NOT NULL
);
-- Lease changes other than renewals (acquire, takeover, release), for the lease pane.
CREATE TABLE lease_log (
    id     INTEGER PRIMARY KEY,
    at     INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    holder TEXT    NOT NULL,
    gen    INTEGER NOT NULL,
    previous_holder TEXT
);
-- Fencing made visible: every finish refused because its generation was stale.
CREATE TABLE refused_finishes (
    id          INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,
    holder      TEXT    NOT NULL,
    gen         INTEGER NOT NULL,
    event_ids   TEXT    NOT NULL,   -- JSON list
    lease_holder TEXT,
    lease_gen   INTEGER,
    reason      TEXT    NOT NULL
);
