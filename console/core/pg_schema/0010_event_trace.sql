-- The PostgreSQL twin of schema/0023_event_trace.sql.
ALTER TABLE inbox ADD COLUMN trace TEXT;
