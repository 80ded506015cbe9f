-- The PostgreSQL twin of schema/0026_held_reply_to.sql.
ALTER TABLE held_messages ADD COLUMN reply_to TEXT;
