-- Each channel keeps its own count of failed tries of a batch ('retry' rows), so a channel that is down
-- is given up on after its own attempts, and a healthy channel is never held behind it: the held lane
-- moves on once any channel has taken a batch, and a channel still owing an earlier batch of its lane
-- waits for that one first, so every channel gets the batches in order.
CREATE TABLE outbox_deliveries_0006 (
    batch_id INTEGER NOT NULL REFERENCES outbox_batches (id),
    channel  TEXT    NOT NULL,
    state    TEXT    NOT NULL CHECK (state IN ('sent', 'failed', 'retry')),
    at       INTEGER NOT NULL,
    error    TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,   -- failed tries so far ('retry'); sends that were never tried count none
    PRIMARY KEY (batch_id, channel)
) WITHOUT ROWID;
INSERT INTO outbox_deliveries_0006 (batch_id, channel, state, at, error)
    SELECT batch_id, channel, state, at, error FROM outbox_deliveries;
DROP TABLE outbox_deliveries;
ALTER TABLE outbox_deliveries_0006 RENAME TO outbox_deliveries;
