-- What the agent spends. One row per model call: a reservation of the call's worst case is written before
-- the call is made (in the transaction that checks the budgets, so concurrent reservations cannot pass one
-- together), and settled with the real usage after it. A reservation never settled (the worker died during
-- the call, or the reply never came) stays counted at its worst case: the provider may have billed it.
-- A call the provider refused deletes its reservation. A replayed journal turn makes no call and no row.
CREATE TABLE spend (
    id                 INTEGER PRIMARY KEY,
    at                 INTEGER NOT NULL,  -- when the call was made: the day and month it counts in
    state              TEXT    NOT NULL CHECK (state IN ('reserved', 'settled')),
    event_id           INTEGER,           -- the event its conversation (and journal step) is filed under
    step_key           TEXT,              -- the journal step of the model turn
    holder             TEXT,              -- the run that made the call: holder, generation, start
    gen                INTEGER,
    run_at             INTEGER,
    model              TEXT    NOT NULL,  -- asked for; once settled, the model that answered
    reserved_nanos     INTEGER,           -- the worst case held before the call, nano-USD; NULL: no price known
    cost_nanos         INTEGER,           -- what it cost, once settled; NULL: no price known
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    settled_at         INTEGER
);
CREATE INDEX spend_at ON spend (at);
CREATE INDEX spend_event ON spend (event_id, at) WHERE event_id IS NOT NULL;
-- Budgets the owner set with `agent-console budget`: they win over the config file and the environment
-- until cleared, and a running engine obeys them at its next model call. 0 = no limit.
CREATE TABLE budgets (
    kind   TEXT    PRIMARY KEY CHECK (kind IN ('daily', 'monthly')),
    usd    REAL    NOT NULL CHECK (usd >= 0),
    set_at INTEGER NOT NULL
) WITHOUT ROWID;
-- What lifts a pause besides a restart, as JSON: a budget pause names its budget and the limit that was
-- reached, and lifts at `until` (the day or month rolls over) or as soon as that budget changes.
ALTER TABLE agent_state ADD COLUMN cause TEXT;
