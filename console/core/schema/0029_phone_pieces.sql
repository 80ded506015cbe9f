-- Every piece of a message a phone channel sent, by the service's handle of each (Telegram cuts a run's reply over
-- 4096 characters in pieces): the owner may answer any of them, and the answer is known for an answer to that
-- outbox message whichever piece it quotes. phone_messages keeps the first piece's handle, as before.
CREATE TABLE phone_pieces (
    channel   TEXT    NOT NULL,
    ref       TEXT    NOT NULL,
    outbox_id INTEGER NOT NULL,
    piece     INTEGER NOT NULL,   -- 1, 2, ...: its place in the message
    pieces    INTEGER NOT NULL,   -- how many the message was cut into
    PRIMARY KEY (channel, ref)
) WITHOUT ROWID;
CREATE INDEX phone_pieces_outbox ON phone_pieces (outbox_id);  -- pruned with their outbox rows
