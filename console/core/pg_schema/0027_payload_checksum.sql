-- Issue 37, item 6: each event's payload carries the CRC-32 of its UTF-8 bytes, written by its insert
-- (statements.INSERT_COLUMNS, payload_checksum; SQLite's migration 0035). Events stored before have none (NULL).
-- PostgreSQL checks its pages only when the cluster was initialised with data checksums (off by default, and not
-- something an inbox can turn on): the payload's own checksum holds on either engine and survives a `migrate`.
--
-- The ingest functions (0020's inbox_ingest_one, 0021's inbox_ingest_set) take the checksum beside the payload; the
-- claim function hands back whole inbox rows (0021), so it carries the new column as it is.
ALTER TABLE inbox ADD COLUMN payload_crc32 BIGINT;

DROP FUNCTION inbox_ingest_one(BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BOOLEAN);

CREATE FUNCTION inbox_ingest_one(lock_key BIGINT, channel TEXT, new_source TEXT, new_source_id TEXT,
                                 new_payload TEXT, new_payload_crc32 BIGINT, now BIGINT, only_if_free BOOLEAN)
    RETURNS TABLE (stored BOOLEAN, mark_state TEXT, mark_other TEXT, mark_at BIGINT, busy BOOLEAN)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    mark RECORD;
BEGIN
    IF NOT only_if_free THEN
        PERFORM pg_advisory_xact_lock(lock_key);
    ELSIF NOT pg_try_advisory_xact_lock(lock_key) THEN
        RETURN QUERY SELECT false, NULL::TEXT, NULL::TEXT, NULL::BIGINT, true;
        RETURN;
    END IF;
    SELECT m.state, m.other, m.at INTO mark FROM move_mark m WHERE m.one = 1;
    IF FOUND THEN
        RETURN QUERY SELECT false, mark.state, mark.other, mark.at, false;
        RETURN;
    END IF;
    INSERT INTO inbox (source, source_id, payload, payload_crc32, created_at, updated_at)
        VALUES (new_source, new_source_id, new_payload, new_payload_crc32, now, now)
        ON CONFLICT (source, source_id) DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify(channel, '');
        RETURN QUERY SELECT true, NULL::TEXT, NULL::TEXT, NULL::BIGINT, false;
    ELSE
        RETURN QUERY SELECT false, NULL::TEXT, NULL::TEXT, NULL::BIGINT, false;
    END IF;
END $$;

DROP FUNCTION inbox_ingest_set(BIGINT, TEXT, TEXT[], TEXT[], TEXT[], TEXT[], BIGINT);

CREATE FUNCTION inbox_ingest_set(lock_key BIGINT, channel TEXT, new_sources TEXT[], new_source_ids TEXT[],
                                 new_payloads TEXT[], new_payload_crc32s BIGINT[], new_traces TEXT[], now BIGINT)
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
    INSERT INTO inbox AS i (source, source_id, payload, payload_crc32, created_at, updated_at, trace)
        SELECT e.source, e.source_id, e.payload, e.payload_crc32, now, now, e.trace
          FROM unnest(new_sources, new_source_ids, new_payloads, new_payload_crc32s, new_traces)
               WITH ORDINALITY AS e(source, source_id, payload, payload_crc32, trace, n)
         ORDER BY e.n
        ON CONFLICT (source, source_id) DO UPDATE
           SET duplicates = i.duplicates + 1, last_duplicate_at = excluded.created_at
        RETURNING i.source, i.source_id, i.duplicates, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
    PERFORM pg_notify(channel, '');
END $$;
