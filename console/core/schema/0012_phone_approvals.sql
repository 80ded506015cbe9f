-- Approving from the phone. Where each approval's outcome came from (console, cli, ntfy, telegram, api, or
-- expiry for the expiry timer), recorded by the one answer path in the transaction that settles it.
ALTER TABLE approvals ADD COLUMN answered_via TEXT;
-- An event's detail lists the approvals it asked for.
CREATE INDEX approvals_event ON approvals (event_id) WHERE event_id IS NOT NULL;

-- The approval a message announces, set when a run stages the announcement with its request (RunContext.say
-- with announces=...): a phone channel sends that message as a card with Yes / No buttons.
ALTER TABLE outbox ADD COLUMN approval_id TEXT;
CREATE INDEX outbox_approval ON outbox (approval_id) WHERE approval_id IS NOT NULL;

-- This inbox's name on a shared answer topic. Not a secret: the answer key lives in the secrets file, never
-- here. An answer signed for another inbox names another tag and is ignored.
CREATE TABLE inbox_identity (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    tag TEXT    NOT NULL
);
INSERT INTO inbox_identity (one, tag) VALUES (1, lower(hex(randomblob(8))));

-- Each outbox message a phone channel delivered, with the service's handle for it (a Telegram chat:message,
-- an ntfy sequence id), so a retried batch is not sent twice and a card can be replaced. For an approval
-- card, `wanted` is the state it should show ('ask' while the question is open; then the outcome, or
-- 'again:<outcome>' after a tap on a settled one) and `shown` the state the phone was last given; both
-- are NULL for a plain message. A card whose two differ is due for an update.
CREATE TABLE phone_messages (
    channel     TEXT    NOT NULL,
    outbox_id   INTEGER NOT NULL,
    ref         TEXT    NOT NULL,
    request_id  TEXT,
    shown       TEXT,
    wanted      TEXT,
    tries       INTEGER NOT NULL DEFAULT 0,   -- failed card updates in a row
    next_try_at INTEGER,
    error       TEXT,
    sent_at     INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (channel, outbox_id)
) WITHOUT ROWID;
CREATE INDEX phone_cards_request ON phone_messages (request_id) WHERE request_id IS NOT NULL;
CREATE INDEX phone_messages_outbox ON phone_messages (outbox_id);  -- pruned with their outbox rows
CREATE INDEX phone_cards_due ON phone_messages (channel, next_try_at) WHERE wanted IS NOT shown;

-- Where each phone channel's listener resumes: the last ntfy message id it took, the next Telegram update
-- offset. Moved in the transaction that takes the answer, so a restart neither misses nor replays one.
CREATE TABLE phone_cursors (
    channel    TEXT    PRIMARY KEY,
    cursor     TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Every answer that came from a phone, under the service's own id (ntfy message id, Telegram update id), and
-- what became of it: settled, late (after the deadline), already_answered, or ignored as forged, unknown,
-- other_inbox, wrong_chat or duplicate.
CREATE TABLE phone_answers (
    channel    TEXT    NOT NULL,
    answer_key TEXT    NOT NULL,
    request_id TEXT,
    answer     TEXT,
    verdict    TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    repeats    INTEGER NOT NULL DEFAULT 0,   -- the same service id delivered again (counted as duplicates)
    PRIMARY KEY (channel, answer_key)
) WITHOUT ROWID;
CREATE INDEX phone_answers_at ON phone_answers (at);
CREATE INDEX phone_answers_request ON phone_answers (request_id) WHERE request_id IS NOT NULL;
