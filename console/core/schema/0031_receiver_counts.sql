-- What the webhook receiver met that is not a delivery (issue 37): malformed HTTP requests, by name, with when the
-- last came, so `status --json` (another process) shows them (`receiver.malformed`). Written at most once a second
-- by the receiver, however many come.
CREATE TABLE receiver_counts (
    name    TEXT    PRIMARY KEY,
    count   INTEGER NOT NULL,
    last_at INTEGER NOT NULL
) WITHOUT ROWID;
