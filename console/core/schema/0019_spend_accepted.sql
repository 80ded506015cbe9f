-- Spend (issue 18): a model call without a price makes the day's and the month's spend unknown, and an unknown
-- spend cannot be held to a budget. When the owner changes that budget while the agent is paused for it, the
-- unknown calls made until then are accepted: they no longer stop the agent (they stay unknown in reports).
CREATE TABLE spend_accepted (
    kind TEXT    PRIMARY KEY CHECK (kind IN ('daily', 'monthly')),
    at   INTEGER NOT NULL           -- calls without a price made until then no longer count as unknown
) WITHOUT ROWID;
