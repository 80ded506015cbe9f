-- SQLite's 0021: a third journal state, `unknown` (a world-changing call sent whose answer never came).
ALTER TABLE journal DROP CONSTRAINT journal_state_check;
ALTER TABLE journal ADD CONSTRAINT journal_state_check CHECK (state IN ('claimed', 'committed', 'unknown'));
