-- Who may read a message (issue 31, the confidentiality model): NULL, every channel; 'owner', only the owner's own
-- direct channels (the console, a file, a phone channel's direct chat), never a channel that reaches others (an HTTP
-- or apprise channel) nor a group chat. SQLite's 0030.
ALTER TABLE outbox ADD COLUMN audience TEXT;
ALTER TABLE held_messages ADD COLUMN audience TEXT;
