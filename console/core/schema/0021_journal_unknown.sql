-- A third journal state, `unknown`: a world-changing step whose call was sent but whose answer never came (it
-- timed out, the connection was lost, the server or the engine died mid-call). It may or may not have happened,
-- so it is never run again silently: a caller that cannot repeat it safely is told (OutcomeUnknown) and the
-- owner decides. `result` holds {"outcome_unknown": why}.
--
-- SQLite cannot change a CHECK constraint in place: the journal is rebuilt (the twelve-step procedure, as 0014
-- did for the inbox), inside the migration's own transaction. No table references journal.
CREATE TABLE journal_0021 (
    idem_key     TEXT    PRIMARY KEY,
    state        TEXT    NOT NULL CHECK (state IN ('claimed', 'committed', 'unknown')),
    gen          INTEGER NOT NULL,
    event_id     INTEGER,
    claimed_at   INTEGER NOT NULL,
    committed_at INTEGER,
    result       TEXT,
    executions   INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
INSERT INTO journal_0021 (idem_key, state, gen, event_id, claimed_at, committed_at, result, executions)
    SELECT idem_key, state, gen, event_id, claimed_at, committed_at, result, executions FROM journal;
DROP TABLE journal;
ALTER TABLE journal_0021 RENAME TO journal;
CREATE INDEX journal_event ON journal (event_id) WHERE event_id IS NOT NULL;
