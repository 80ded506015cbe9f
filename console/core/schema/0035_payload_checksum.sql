-- Issue 37, item 6: each event's payload carries the CRC-32 of its UTF-8 bytes, written by its insert
-- (statements.INSERT_COLUMNS, payload_checksum). A read that finds other bytes (bit rot inside a page that SQLite's
-- structural checks pass) reports the event damaged; `check` verifies every one. Events stored before this migration
-- have none (NULL) and are read as before; so are payloads `prune` cleared.
ALTER TABLE inbox ADD COLUMN payload_crc32 INTEGER;
