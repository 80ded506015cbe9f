-- The PostgreSQL twin of schema/0027_chat_updates_taken.sql.
ALTER TABLE chat_updates ADD COLUMN taken_at BIGINT;
CREATE INDEX chat_updates_waiting ON chat_updates (source, update_id) WHERE taken_at IS NULL;
-- Kept updates below the Telegram listener's cursor were taken already: marked so, not handled again (see 0027).
UPDATE chat_updates SET taken_at = received_at
 WHERE source = 'telegram'
   AND update_id < (SELECT MIN(cursor::NUMERIC) FROM phone_cursors WHERE cursor ~ '^[0-9]+$');
