-- What each channel did with a batch. A batch retried because one channel failed is not sent again
-- to the channels that already took it; an at-most-once channel is marked before its send.
CREATE TABLE outbox_deliveries (
    batch_id INTEGER NOT NULL REFERENCES outbox_batches (id),
    channel  TEXT    NOT NULL,
    state    TEXT    NOT NULL CHECK (state IN ('sent', 'failed')),
    at       INTEGER NOT NULL,
    error    TEXT,
    PRIMARY KEY (batch_id, channel)
) WITHOUT ROWID;
