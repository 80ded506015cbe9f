-- The PostgreSQL twin of schema/0024_tool_health.sql.
CREATE TABLE tool_health (
    server TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    reason TEXT,
    since BIGINT NOT NULL
);
