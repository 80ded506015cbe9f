-- Chat sources (issue 20): a chat app (Telegram) as a two-way conversation with the owner.
-- The chats paired as the owner's: `agent-console telegram pair` makes a one-time code, the owner sends it to
-- the bot, and the chat is stored here with the user who sent it (in a group, only that user is trusted).
CREATE TABLE chat_pairings (
    source    TEXT    NOT NULL,          -- telegram
    chat_id   TEXT    NOT NULL,
    owner_id  TEXT    NOT NULL,          -- the user who paired it: the owner
    kind      TEXT    NOT NULL,          -- private | group | supergroup | channel (as the service says)
    title     TEXT,
    paired_at INTEGER NOT NULL,
    PRIMARY KEY (source, chat_id)
) WITHOUT ROWID;
-- The one pairing code open per source: its hash only (the code itself is printed once), and its expiry.
CREATE TABLE chat_pair_codes (
    source     TEXT    PRIMARY KEY,
    code_hash  TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
-- Chats that are not paired: their messages never start a run; they are counted, and told at most once an
-- hour that the bot is private.
CREATE TABLE chat_strangers (
    source   TEXT    NOT NULL,
    chat_id  TEXT    NOT NULL,
    messages INTEGER NOT NULL,
    first_at INTEGER NOT NULL,
    last_at  INTEGER NOT NULL,
    told_at  INTEGER,
    PRIMARY KEY (source, chat_id)
) WITHOUT ROWID;
-- Each chat source's health as its listener last saw it (status --json "telegram"), and the updates skipped
-- as malformed or unknown.
CREATE TABLE chat_health (
    source  TEXT    PRIMARY KEY,
    state   TEXT    NOT NULL,            -- ok | paused | conflict | waiting | offline
    reason  TEXT,
    since   INTEGER NOT NULL,
    skipped INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- Where a run's message answers: "<source>:<chat id>:<message id>" of the last chat message of its batch.
ALTER TABLE outbox ADD COLUMN reply_to TEXT;
