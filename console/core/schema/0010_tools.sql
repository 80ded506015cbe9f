-- Tools behind a policy (issue 9). An approval can be bound to one exact tool call: the tool's name and its
-- canonical JSON arguments are what runs on yes, and `sources` says which events started the run and where
-- they came from (the owner sees it before answering).
ALTER TABLE approvals ADD COLUMN tool TEXT;
ALTER TABLE approvals ADD COLUMN arguments TEXT;
ALTER TABLE approvals ADD COLUMN sources TEXT;

-- The agent's small memory across runs: written by a run's fenced finish (remember / forget), or by the
-- owner (`agent-console memory`).
CREATE TABLE memory (
    key        TEXT    PRIMARY KEY,
    value      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    event_id   INTEGER              -- the event whose run wrote it; NULL when the owner did
) WITHOUT ROWID;

-- What each tool call of a finished run was, for the event's transcript: the policy's decision and what came
-- back. Written by the run's finish, with everything else it produced.
CREATE TABLE tool_calls (
    id         INTEGER PRIMARY KEY,
    event_id   INTEGER NOT NULL,
    use_id     TEXT    NOT NULL,
    tool       TEXT    NOT NULL,
    arguments  TEXT    NOT NULL,
    decision   TEXT    NOT NULL,   -- allowed | asked | denied | unknown | approved | declined | expired
    outcome    TEXT    NOT NULL,   -- done | error | deferred | refused
    result     TEXT,               -- what the model was given back (cut to a few kB)
    request_id TEXT,               -- the approval it asked for, or ran under
    at         INTEGER NOT NULL
);
CREATE INDEX tool_calls_event ON tool_calls (event_id, id);
