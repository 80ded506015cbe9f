-- What the webhook receiver met that is not a delivery (SQLite migration 0031).
CREATE TABLE receiver_counts (
    name    TEXT   PRIMARY KEY,
    count   BIGINT NOT NULL,
    last_at BIGINT NOT NULL
);
