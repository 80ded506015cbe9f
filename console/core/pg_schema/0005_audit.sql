-- The audit trail, as SQLite's migration 0018 adds it (see there).
CREATE TABLE audit (
    seq       BIGINT PRIMARY KEY,
    at        BIGINT NOT NULL,
    kind      TEXT   NOT NULL,
    event_id  BIGINT,
    body      TEXT   NOT NULL,
    prev_hash TEXT   NOT NULL,
    hash      TEXT   NOT NULL
);
CREATE INDEX audit_at ON audit (at);

CREATE TABLE audit_head (
    one       BIGINT PRIMARY KEY CHECK (one = 1),
    seq       BIGINT NOT NULL,
    hash      TEXT   NOT NULL,
    base_seq  BIGINT NOT NULL,
    base_hash TEXT   NOT NULL
);
INSERT INTO audit_head (one, seq, hash, base_seq, base_hash) VALUES (1, 0, '', 0, '');

ALTER TABLE tool_calls ADD COLUMN rule TEXT;
ALTER TABLE tool_calls ADD COLUMN provenance TEXT;
ALTER TABLE tool_calls ADD COLUMN run TEXT;
