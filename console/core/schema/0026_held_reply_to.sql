-- A run's reply to a chat message, held past max_messages_per_hour, keeps the message it answers: once the owner
-- releases it, it goes back to that conversation (the outbox's reply_to) like the replies that were not held.
ALTER TABLE held_messages ADD COLUMN reply_to TEXT;
