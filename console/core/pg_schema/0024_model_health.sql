-- The PostgreSQL twin of schema/0032_model_health.sql.
CREATE TABLE model_health (
    credential TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    until BIGINT,
    reason TEXT,
    failing_since BIGINT,
    notified TEXT,
    announced_at BIGINT,
    holder TEXT,
    gen BIGINT,
    updated_at BIGINT NOT NULL
);
