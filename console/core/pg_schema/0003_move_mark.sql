-- SQLite's migration 0016: an inbox's part in a move (`agent-console migrate`), read by every write
-- transaction first (see there).
CREATE TABLE move_mark (
    one   BIGINT PRIMARY KEY CHECK (one = 1),
    state TEXT   NOT NULL CHECK (state IN ('moving', 'moved', 'incomplete')),
    other TEXT   NOT NULL,
    at    BIGINT NOT NULL
);
