-- Webhook mode's kept updates are marked taken, exactly those the listener read, in the transaction that takes them
-- (the message stored, the tap answered, the command passed), instead of deleted "below the cursor" once past:
-- Telegram may deliver updates out of order, and an update kept after the listener's read with a lower id was
-- deleted unread, or refused as a redelivery once the cursor had passed it. A taken row stays a while as the
-- mark that refuses a redelivery of it (Telegram retries a delivery it saw fail), then is pruned.
ALTER TABLE chat_updates ADD COLUMN taken_at INTEGER;
CREATE INDEX chat_updates_waiting ON chat_updates (source, update_id) WHERE taken_at IS NULL;
