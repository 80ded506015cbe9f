-- The PostgreSQL twin of schema/0022_chat_updates.sql.
CREATE TABLE chat_updates (
    source      TEXT   NOT NULL,
    update_id   BIGINT NOT NULL,
    body        TEXT   NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (source, update_id)
);
