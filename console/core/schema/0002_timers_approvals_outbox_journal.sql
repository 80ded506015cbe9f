-- Timers feed the inbox; they never start a run.
CREATE TABLE timers (
    id          TEXT    PRIMARY KEY,
    due         INTEGER NOT NULL,
    every       INTEGER,               -- interval timers
    cron        TEXT,                  -- cron timers, evaluated in tz
    tz          TEXT,
    payload     TEXT    NOT NULL,
    ev_source   TEXT,                  -- a fixed event key (one-offs only)
    ev_id       TEXT,
    catch_up    TEXT    NOT NULL DEFAULT 'coalesce' CHECK (catch_up IN ('coalesce', 'each')),
    each_cap    INTEGER NOT NULL DEFAULT 100,
    paused      INTEGER NOT NULL DEFAULT 0,
    done        INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    last_fired_at INTEGER,
    CHECK (every IS NULL OR every > 0)
);
CREATE INDEX timers_due ON timers (due) WHERE done = 0 AND paused = 0;

-- Deferred tool calls waiting for a yes/no. The outcome that stands is the inbox row
-- ('approval', request_id); outcome here mirrors it for listing.
CREATE TABLE approvals (
    request_id   TEXT    PRIMARY KEY,
    action       TEXT    NOT NULL,
    details      TEXT    NOT NULL DEFAULT '{}',
    session_id   TEXT,
    requested_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    outcome      TEXT,
    resolved_at  INTEGER
) WITHOUT ROWID;
CREATE INDEX approvals_pending ON approvals (expires_at) WHERE outcome IS NULL;
CREATE INDEX approvals_resolved ON approvals (resolved_at) WHERE outcome IS NOT NULL;

-- Messages a run produced, held until the dispatcher's gap allows a send.
CREATE TABLE outbox (
    id         INTEGER PRIMARY KEY,
    body       TEXT    NOT NULL,
    urgent     INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    event_id   INTEGER,
    batch_id   INTEGER REFERENCES outbox_batches (id),
    status     TEXT    NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'sending', 'sent', 'failed')),
    sent_at    INTEGER
);
CREATE INDEX outbox_queued ON outbox (urgent, id) WHERE status = 'queued';
CREATE INDEX outbox_batch ON outbox (batch_id);
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE status = 'sent';

-- One send of held messages. The key is the channel's idempotency key, the same on every retry.
CREATE TABLE outbox_batches (
    id          INTEGER PRIMARY KEY,
    key         TEXT    NOT NULL UNIQUE,
    urgent      INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('sending', 'retry', 'sent', 'failed')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    claimed_until INTEGER,               -- a dispatcher that died mid-send frees the batch after this
    next_try_at INTEGER,
    last_error  TEXT,
    sent_at     INTEGER,
    channel     TEXT
);
CREATE INDEX outbox_batches_open ON outbox_batches (next_try_at) WHERE state IN ('sending', 'retry');
CREATE INDEX outbox_batches_sent ON outbox_batches (sent_at) WHERE state = 'sent';

-- The step journal (seed 003): claim -> execute -> commit, once per key across retries and takeovers.
CREATE TABLE journal (
    idem_key     TEXT    PRIMARY KEY,
    state        TEXT    NOT NULL CHECK (state IN ('claimed', 'committed')),
    gen          INTEGER NOT NULL,
    event_id     INTEGER,
    claimed_at   INTEGER NOT NULL,
    committed_at INTEGER,
    result       TEXT,
    executions   INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
CREATE INDEX journal_event ON journal (event_id) WHERE event_id IS NOT NULL;

-- Saved agent sessions, so a deferred tool call resumes where it stopped.
CREATE TABLE sessions (
    session_id TEXT    PRIMARY KEY,
    state      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
