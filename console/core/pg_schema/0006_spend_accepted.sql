-- The PostgreSQL twin of schema/0019_spend_accepted.sql.
CREATE TABLE spend_accepted (
    kind TEXT   PRIMARY KEY CHECK (kind IN ('daily', 'monthly')),
    at   BIGINT NOT NULL
);
