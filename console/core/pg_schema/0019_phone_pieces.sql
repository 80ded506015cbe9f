-- The PostgreSQL twin of schema/0029_phone_pieces.sql.
CREATE TABLE phone_pieces (
    channel   TEXT   NOT NULL,
    ref       TEXT   NOT NULL,
    outbox_id BIGINT NOT NULL,
    piece     BIGINT NOT NULL,
    pieces    BIGINT NOT NULL,
    PRIMARY KEY (channel, ref)
);
CREATE INDEX phone_pieces_outbox ON phone_pieces (outbox_id);
