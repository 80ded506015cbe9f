-- Facts as fields. Why an event died is its own column, written in the transaction that kills it, so no
-- reader parses it back out of a sentence: 'failed' (its last attempt's run failed; error holds what
-- failed), 'lost' (its last attempt's worker lost the lease mid-run) or 'out_of_attempts' (found waiting
-- for a retry with no attempts left). error keeps the last error itself. Cleared when the event is retried.
-- Events that died before this column leave it NULL: their error keeps the sentence they were given then.
ALTER TABLE inbox ADD COLUMN dead_reason TEXT;
-- An event's detail lists the replies its run queued, read by this index instead of from the newest rows.
CREATE INDEX outbox_event ON outbox (event_id, id) WHERE event_id IS NOT NULL;
