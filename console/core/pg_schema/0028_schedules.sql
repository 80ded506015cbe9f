-- The PostgreSQL twin of schema/0036_schedules.sql.
-- The agent's own schedules (issue 35). A schedule is the owner-approved record (title, instruction, tools,
-- budgets, expiry, origin, state); its occurrences are fired by a timer of its own, `schedule:<id>`, so each
-- occurrence is stored exactly once under `schedule:<id>@<scheduled time>` like every timer's, coalesced when
-- missed, across crashes, takeovers, clock jumps and DST.
-- A timer's `ends_at`: no occurrence fires at or after it (a schedule's expiry); the timer is done then.
ALTER TABLE timers ADD COLUMN ends_at BIGINT;
CREATE INDEX timers_ends ON timers (ends_at) WHERE ends_at IS NOT NULL AND done = 0;
CREATE TABLE schedules (
    id              TEXT    PRIMARY KEY,
    title           TEXT    NOT NULL,
    instruction     TEXT    NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('once', 'every', 'cron')),
    at              BIGINT,              -- once: the time; every: the first occurrence (the grid's anchor)
    every           BIGINT,              -- seconds between occurrences
    cron            TEXT,
    tz              TEXT,
    tools           TEXT,                 -- JSON list of tool names the occurrences may use; NULL: the policy's
    budget_occurrence_nanos BIGINT,      -- nano-USD; NULL: no limit
    budget_month_nanos      BIGINT,
    only_if_changed BIGINT NOT NULL DEFAULT 0,
    watch           TEXT,                 -- JSON {"sources": [...], "tool": name, "arguments": {...}}
    seen            TEXT,                 -- JSON {"event_id": N, "hash": "..."}: what the last occurrence saw
    expires_at      BIGINT,              -- no occurrence at or after it; NULL: never (a one-off)
    state           TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused')),
    paused_reason   TEXT,
    origin          TEXT,                 -- the run that asked for it (its trust: occurrences run with it)
    request_id      TEXT,                 -- the approval it was created or last changed under
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    last_outcome    TEXT,                 -- ran | skipped | paused (budget) | ...
    last_at         BIGINT,
    expiry_told     BIGINT NOT NULL DEFAULT 0,  -- the owner was told the day before it expires
    budget_told     BIGINT NOT NULL DEFAULT 0   -- the owner was told of its budget pause
);
CREATE INDEX schedules_expiry ON schedules (expires_at) WHERE expiry_told = 0 AND expires_at IS NOT NULL;
