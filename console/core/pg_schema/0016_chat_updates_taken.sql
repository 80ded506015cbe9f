-- The PostgreSQL twin of schema/0027_chat_updates_taken.sql.
ALTER TABLE chat_updates ADD COLUMN taken_at BIGINT;
CREATE INDEX chat_updates_waiting ON chat_updates (source, update_id) WHERE taken_at IS NULL;
