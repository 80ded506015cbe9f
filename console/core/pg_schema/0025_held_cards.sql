-- The PostgreSQL twin of schema/0033_held_cards.sql.
ALTER TABLE held_messages ADD COLUMN approval_id TEXT;
