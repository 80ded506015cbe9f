-- The agent as a whole, one row, written by the engine that holds the lease and read by any process (`status`,
-- the console): 'ready'; 'waiting' out the provider's back-pressure until `until`; or 'paused' because the
-- provider refuses its configuration (a bad key, an unknown model) until the engine restarts. Neither
-- spends an event's attempts: the events a run could not use go back to pending unclaimed.
CREATE TABLE agent_state (
    one      INTEGER PRIMARY KEY CHECK (one = 1),
    state    TEXT    NOT NULL CHECK (state IN ('ready', 'waiting', 'paused')),
    reason   TEXT,
    until    INTEGER,
    since    INTEGER NOT NULL,
    holder   TEXT,
    gen      INTEGER,
    waits    INTEGER NOT NULL DEFAULT 0,  -- back-to-back waits, so a wait the provider did not size can grow
    notified TEXT                         -- the pause the owner was told about, so it is told once
);
INSERT INTO agent_state (one, state, since) VALUES (1, 'ready', 0);
