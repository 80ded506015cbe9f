-- Each model of the chain, per credential (its name, address, model id and key as a fingerprint): cooling down
-- until a time, or paused (the provider refused its key or model) until the engine restarts, and why; when it
-- began failing (a model failing past failover_after gives way to the next), the notice the owner was last sent
-- about it, and when a fallback's answer was last announced. Written fenced by the lease holder and generation.
CREATE TABLE model_health (
    credential TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    until INTEGER,
    reason TEXT,
    failing_since INTEGER,
    notified TEXT,
    announced_at INTEGER,
    holder TEXT,
    gen INTEGER,
    updated_at INTEGER NOT NULL
);
