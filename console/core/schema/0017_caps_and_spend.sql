-- Caps (issue 18). What counts against the agent's caps, one row each, so that a count survives a restart:
-- a world-changing tool call when it is let through (keyed by its journal step, so a replay or a takeover
-- that runs the same step is counted once), and a message from a run when its finish queues it.
CREATE TABLE cap_uses (
    id       INTEGER PRIMARY KEY,
    kind     TEXT    NOT NULL CHECK (kind IN ('call', 'message')),
    at       INTEGER NOT NULL,
    event_id INTEGER,              -- a call: the event its conversation is filed under
    step_key TEXT    UNIQUE,       -- a call: its journal step
    tool     TEXT
);
CREATE INDEX cap_uses_at ON cap_uses (kind, at);
CREATE INDEX cap_uses_event ON cap_uses (event_id) WHERE kind = 'call';
-- When the owner was told that a cap was reached, so that a crossing is announced once, not once a call.
CREATE TABLE cap_notices (
    cap TEXT    NOT NULL,          -- max_tool_calls_per_run:EVENT, max_tool_calls_per_hour, max_messages_per_hour
    at  INTEGER NOT NULL,
    PRIMARY KEY (cap, at)
) WITHOUT ROWID;
-- Messages a run queued past max_messages_per_hour: kept, not sent, until the owner releases them into the
-- outbox (`agent-console held release`).
CREATE TABLE held_messages (
    id          INTEGER PRIMARY KEY,
    body        TEXT    NOT NULL,
    urgent      INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    event_id    INTEGER,
    released_at INTEGER,
    outbox_id   INTEGER            -- the outbox message it became when released
);
CREATE INDEX held_messages_waiting ON held_messages (id) WHERE released_at IS NULL;

-- Spend: the model the run asked for, kept apart from the one that answered (a call is priced at the dearer
-- of the two), and the reservation's prompt and output tokens, so a price added later re-prices a call
-- that had none. The unpriced calls are few and found by their own index.
ALTER TABLE spend ADD COLUMN asked_model TEXT;
ALTER TABLE spend ADD COLUMN prompt_tokens INTEGER;
ALTER TABLE spend ADD COLUMN max_tokens INTEGER;
CREATE INDEX spend_unpriced ON spend (id)
    WHERE (state = 'settled' AND cost_nanos IS NULL) OR (state = 'reserved' AND reserved_nanos IS NULL);
