-- Issue 22: ingest and ingest_many on PostgreSQL in one statement each, whose plans the server keeps (a PL/pgSQL
-- function plans its statements once a session): the writers' lock, then the move mark read in a snapshot taken once
-- the lock is held (a VOLATILE function takes one per statement; nothing is written when there is a mark), the
-- INSERT, and a NOTIFY when it wrote. PgStore calls each as the one statement of an autocommit transaction (a
-- durable commit). No SQLite twin: SQLite runs the same steps as statements of its own transaction.

-- One event: a stored key is refused by the INSERT itself (its count is held in memory by the caller).
CREATE FUNCTION inbox_ingest_one(lock_key BIGINT, channel TEXT, new_source TEXT, new_source_id TEXT,
                                 new_payload TEXT, now BIGINT)
    RETURNS TABLE (stored BOOLEAN, mark_state TEXT, mark_other TEXT, mark_at BIGINT)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    mark RECORD;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT m.state, m.other, m.at INTO mark FROM move_mark m WHERE m.one = 1;
    IF FOUND THEN
        RETURN QUERY SELECT false, mark.state, mark.other, mark.at;
        RETURN;
    END IF;
    INSERT INTO inbox (source, source_id, payload, created_at, updated_at)
        VALUES (new_source, new_source_id, new_payload, now, now)
        ON CONFLICT (source, source_id) DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify(channel, '');
        RETURN QUERY SELECT true, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
    ELSE
        RETURN QUERY SELECT false, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
    END IF;
END $$;

-- Events whose keys are each once in the call (PgStore._ingest_encoded): stored in the call's order, a stored key's
-- copy counted on its row as one ingest after another would (the duplicate ledger); one row back per event.
CREATE FUNCTION inbox_ingest_set(lock_key BIGINT, channel TEXT, new_sources TEXT[], new_source_ids TEXT[],
                                 new_payloads TEXT[], now BIGINT)
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
    INSERT INTO inbox AS i (source, source_id, payload, created_at, updated_at)
        SELECT e.source, e.source_id, e.payload, now, now
          FROM unnest(new_sources, new_source_ids, new_payloads) WITH ORDINALITY AS e(source, source_id, payload, n)
         ORDER BY e.n
        ON CONFLICT (source, source_id) DO UPDATE
           SET duplicates = i.duplicates + 1, last_duplicate_at = excluded.created_at
        RETURNING i.source, i.source_id, i.duplicates, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
    PERFORM pg_notify(channel, '');
END $$;
