-- Issue 32: the fast paths no longer restate the inbox's columns, and the webhook receiver's groups use the set ingest.
--
-- 1. inbox_claim_fresh hands back whole inbox rows (the table's own row type), from which its caller picks the core's
--    statements.EVENT_COLUMNS: a new inbox column needs no change here (0014 listed the sixteen it had then).
-- 2. inbox_ingest_set takes each event's trace context (a webhook delivery's traceparent, or NULL), as the shared
--    path's INSERT_EVENT does, so the receiver's group commit (Store.ingest_encoded_deliveries) is one round trip too.
-- Otherwise the same steps as 0013's and 0014's; tests/core/test_hot_path_parity.py compares them with the shared path.

DROP FUNCTION inbox_claim_fresh(BIGINT, TEXT, TEXT, BIGINT, BIGINT, BIGINT);

CREATE FUNCTION inbox_claim_fresh(lock_key BIGINT, channel TEXT, claimer TEXT, claimer_gen BIGINT, now BIGINT,
                                  cap BIGINT)
    RETURNS TABLE (applied BOOLEAN, event_row inbox)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    -- Anything to see to? (fresh, a due or hand retry, a run lost by an older generation, a move mark)
    IF NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.attempts = 0 AND i.claim_alone = 0)
       AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.attempts > 0
                                              AND i.next_attempt_at <= now)
       AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.claim_alone = 1)
       AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'running' AND i.claim_gen < claimer_gen)
       AND NOT EXISTS (SELECT 1 FROM move_mark m WHERE m.one = 1) THEN
        RETURN QUERY SELECT true, NULL::inbox;
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(lock_key);
    -- A statement of its own after the lock's: its snapshot sees every writer's commit before this one.
    IF EXISTS (SELECT 1 FROM move_mark m WHERE m.one = 1)
       OR NOT EXISTS (SELECT 1 FROM lease l WHERE l.one = 1 AND l.holder = claimer AND l.gen = claimer_gen
                                              AND l.until >= now)
       OR EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'running' AND i.claim_gen < claimer_gen)
       OR EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.attempts > 0 AND i.next_attempt_at <= now)
       OR EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.claim_alone = 1) THEN
        RETURN QUERY SELECT false, NULL::inbox;
        RETURN;
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE inbox i SET status = 'running', attempts = i.attempts + 1, claim_gen = claimer_gen, updated_at = now,
                           claim_alone = 0, failed_with = NULL
         WHERE i.id IN (SELECT f.id FROM inbox f WHERE f.status = 'pending' AND f.attempts = 0 AND f.claim_alone = 0
                         ORDER BY f.id LIMIT cap)
        RETURNING i AS whole),
    logged AS (
        INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
        SELECT (c.whole).id, now, 'claim', claimer, claimer_gen, 'attempt ' || (c.whole).attempts
          FROM claimed c ORDER BY (c.whole).id)
    SELECT true, c.whole FROM claimed c ORDER BY (c.whole).id;
    IF FOUND THEN
        PERFORM pg_notify(channel, '');
    ELSE
        RETURN QUERY SELECT true, NULL::inbox;
    END IF;
END $$;

DROP FUNCTION inbox_ingest_set(BIGINT, TEXT, TEXT[], TEXT[], TEXT[], BIGINT);

CREATE FUNCTION inbox_ingest_set(lock_key BIGINT, channel TEXT, new_sources TEXT[], new_source_ids TEXT[],
                                 new_payloads TEXT[], new_traces TEXT[], now BIGINT)
    RETURNS TABLE (stored_source TEXT, stored_source_id TEXT, copies BIGINT, mark_state TEXT, mark_other TEXT,
                   mark_at BIGINT)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    mark RECORD;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT m.state, m.other, m.at INTO mark FROM move_mark m WHERE m.one = 1;
    IF FOUND THEN
        RETURN QUERY SELECT NULL::TEXT, NULL::TEXT, NULL::BIGINT, mark.state, mark.other, mark.at;
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO inbox AS i (source, source_id, payload, created_at, updated_at, trace)
        SELECT e.source, e.source_id, e.payload, now, now, e.trace
          FROM unnest(new_sources, new_source_ids, new_payloads, new_traces)
               WITH ORDINALITY AS e(source, source_id, payload, trace, n)
         ORDER BY e.n
        ON CONFLICT (source, source_id) DO UPDATE
           SET duplicates = i.duplicates + 1, last_duplicate_at = excluded.created_at
        RETURNING i.source, i.source_id, i.duplicates, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
    PERFORM pg_notify(channel, '');
END $$;
