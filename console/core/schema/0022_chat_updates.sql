-- Chat sources in webhook mode (issue 20): the receiver keeps each update Telegram POSTs, under its update id,
-- before it answers 200; the engine holding the lease takes them in order from its stored cursor, exactly as
-- it takes what getUpdates returns (the same keys, pairing, commands and taps), and forgets them once past.
CREATE TABLE chat_updates (
    source      TEXT    NOT NULL,
    update_id   INTEGER NOT NULL,
    body        TEXT    NOT NULL,    -- the update, as JSON
    received_at INTEGER NOT NULL,
    PRIMARY KEY (source, update_id)
) WITHOUT ROWID;
