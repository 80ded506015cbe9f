-- The PostgreSQL twin of schema/0020_chat_sources.sql.
CREATE TABLE chat_pairings (
    source    TEXT   NOT NULL,
    chat_id   TEXT   NOT NULL,
    owner_id  TEXT   NOT NULL,
    kind      TEXT   NOT NULL,
    title     TEXT,
    paired_at BIGINT NOT NULL,
    PRIMARY KEY (source, chat_id)
);
CREATE TABLE chat_pair_codes (
    source     TEXT   PRIMARY KEY,
    code_hash  TEXT   NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE TABLE chat_strangers (
    source   TEXT   NOT NULL,
    chat_id  TEXT   NOT NULL,
    messages BIGINT NOT NULL,
    first_at BIGINT NOT NULL,
    last_at  BIGINT NOT NULL,
    told_at  BIGINT,
    PRIMARY KEY (source, chat_id)
);
CREATE TABLE chat_health (
    source  TEXT   PRIMARY KEY,
    state   TEXT   NOT NULL,
    reason  TEXT,
    since   BIGINT NOT NULL,
    skipped BIGINT NOT NULL DEFAULT 0
);
ALTER TABLE outbox ADD COLUMN reply_to TEXT;
