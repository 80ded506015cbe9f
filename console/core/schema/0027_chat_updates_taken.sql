-- Webhook mode's kept updates are marked taken, exactly those the listener read, in the transaction that takes them
-- (the message stored, the tap answered, the command passed), instead of deleted "below the cursor" once past:
-- Telegram may deliver updates out of order, and an update kept after the listener's read with a lower id was
-- deleted unread, or refused as a redelivery once the cursor had passed it. A taken row stays a while as the
-- mark that refuses a redelivery of it (Telegram retries a delivery it saw fail), then is pruned.
ALTER TABLE chat_updates ADD COLUMN taken_at INTEGER;
CREATE INDEX chat_updates_waiting ON chat_updates (source, update_id) WHERE taken_at IS NULL;
-- Updates kept before this migration and already taken are those below the Telegram listener's cursor (it read from its
-- cursor on, then forgot those below it; a crash in between leaves some kept): they are marked taken, as of when they
-- came (pruned a week after that), not read and handled again. The listener's cursor is the next update id it wants,
-- the only all-digit one in phone_cursors (ntfy's are message ids, mail's hold colons); the lowest if there are more.
UPDATE chat_updates SET taken_at = received_at
 WHERE source = 'telegram'
   AND update_id < (SELECT MIN(CAST(cursor AS INTEGER)) FROM phone_cursors WHERE cursor <> '' AND cursor NOT GLOB '*[^0-9]*');
