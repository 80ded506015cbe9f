-- inbox_status_id no longer holds fresh events (pending, never claimed, not retried by hand): inbox_fresh holds
-- them already, in id order, and the console reads the pending ones from both (console/core/inbox.py,
-- NOT_FRESH). A durable ingest then changes one index page fewer (about 1.3 WAL frames of its ~7.9, each two
-- writes before its fsync), and a claim of a fresh event inserts into the index without deleting from it first
-- (docs/performance.md, "Store"). A query that reads this index names its condition (NOT_FRESH) as a term.
DROP INDEX inbox_status_id;
CREATE INDEX inbox_status_id ON inbox (status, id) WHERE status <> 'pending' OR attempts > 0 OR claim_alone = 1;
