-- The PostgreSQL twin of schema/0025_failed_with.sql.
ALTER TABLE inbox ADD COLUMN failed_with BIGINT;
