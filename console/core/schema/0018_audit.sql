-- The audit trail (issue 18): one row for every tool call a run recorded and every approval's answer, chained
-- by hash. A row's hash covers its own columns and the previous row's hash, and is written in the transaction
-- that writes the row (a run's fenced finish; the answer's own). audit_head holds the last row (seq, hash), so a
-- row cut from the end is seen, and the anchor a prune leaves: the seq and hash of the last row it deleted,
-- from which the chain that is left is checked.
CREATE TABLE audit (
    seq       INTEGER PRIMARY KEY,
    at        INTEGER NOT NULL,
    kind      TEXT    NOT NULL,    -- call | answer | pruned
    event_id  INTEGER,
    body      TEXT    NOT NULL,    -- the row's content as JSON, hashed as stored
    prev_hash TEXT    NOT NULL,
    hash      TEXT    NOT NULL
);
CREATE INDEX audit_at ON audit (at);

CREATE TABLE audit_head (
    one       INTEGER PRIMARY KEY CHECK (one = 1),
    seq       INTEGER NOT NULL,    -- the last row's
    hash      TEXT    NOT NULL,
    base_seq  INTEGER NOT NULL,    -- rows up to this one were pruned (0: none)
    base_hash TEXT    NOT NULL     -- the hash of the last pruned row ('' when none was)
);
INSERT INTO audit_head (one, seq, hash, base_seq, base_hash) VALUES (1, 0, '', 0, '');

-- What the transcript and the trail say of a call besides its decision: the policy rule that decided it
-- (`allow: mcp__shop__lookup_*`, `default`), the provenance of the run that made it ({"trusted", "summary"}),
-- and the run ({"holder", "gen", "events"}). NULL for calls recorded before this version.
ALTER TABLE tool_calls ADD COLUMN rule TEXT;
ALTER TABLE tool_calls ADD COLUMN provenance TEXT;
ALTER TABLE tool_calls ADD COLUMN run TEXT;
