-- The PostgreSQL twin of schema/0028_status_index_without_fresh.sql: inbox_status_id holds every event but the
-- fresh ones (inbox_fresh has them).
DROP INDEX inbox_status_id;
CREATE INDEX inbox_status_id ON inbox (status, id) WHERE status <> 'pending' OR attempts > 0 OR claim_alone = 1;
