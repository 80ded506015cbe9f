-- A question or approval card from a run that read untrusted content counts toward max_messages_per_hour, and
-- past it is held like any other message (issue 31): the request waits in the console and `status`, answerable
-- there, and a card released later still carries its request (the outbox's approval_id: buttons on a phone).
ALTER TABLE held_messages ADD COLUMN approval_id TEXT;
