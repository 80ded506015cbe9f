-- The replay ledger: digests of signed webhook bodies whose signature covers only the body (github,
-- hmac). Such a delivery's id is not signed, so a captured body re-sent under a new id would pass as
-- new; a byte-identical body seen within its window is refused instead. expires_at = last sighting +
-- the source's window; rows past it are swept by later deliveries, so the table holds one window.
CREATE TABLE replay_ledger (
    source     TEXT    NOT NULL,
    digest     BLOB    NOT NULL,   -- SHA-256 of the raw body bytes
    source_id  TEXT    NOT NULL,   -- the event the body was stored as (a replay is counted on it)
    seen_at    INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (source, digest)
) WITHOUT ROWID;
CREATE INDEX replay_ledger_expiry ON replay_ledger (expires_at);
