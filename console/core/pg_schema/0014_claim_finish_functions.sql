-- Issue 22: the drain on PostgreSQL (claim a batch, finish it).
--
-- 1. The counts by status follow an UPDATE of the inbox once a statement, not once a row. A claim or a finish of 100
--    events fired the row trigger 100 times, each an UPDATE of the same counts row: 100 versions of that row in one
--    transaction, each found by walking the ones before it (about a third of the statement's server time). The
--    statement trigger reads the rows that moved from its transition tables and writes each status's count once.
--    A trigger with transition tables may not name its columns (UPDATE OF status), so it fires on every UPDATE of the
--    inbox and writes nothing when no status moved. INSERT and DELETE keep their row triggers: a single ingest is one
--    row, for which the row trigger is the cheaper. The trigger keeps its name (the SQLite twin's).
--
-- 2. The usual claim and finish are functions, as ingest is (0013): one statement whose plans the server keeps for the
--    session (the same steps sent as a simple query were planned on every call). Each is called as the one statement
--    of an autocommit transaction and commits without waiting for the WAL flush (set_config(..., true): the
--    PostgreSQL form of the relaxed commit SQLite's synchronous=NORMAL gives claims and finishes). Each does the
--    shared path's fenced work for the usual case only (the lease held by (holder, gen) and live, no move mark; for a
--    claim, nothing but fresh events waiting) and otherwise writes nothing and says so: the shared path then runs.
--    The claim looks first, without the writers' lock, whether there is anything to see to at all: an idle consumer
--    polling an empty inbox no longer queues for the lock behind the producers' ingests (what it answers is what a
--    claim just before their commits would have answered; with a move mark it takes the shared path, which refuses).

DROP TRIGGER inbox_count_update ON inbox;

CREATE FUNCTION inbox_count_moves() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE inbox_counts c SET n = c.n + moved.delta
      FROM (SELECT m.status, sum(m.delta) AS delta
              FROM (SELECT o.status, -1 AS delta FROM old_rows o
                    UNION ALL
                    SELECT w.status, 1 AS delta FROM new_rows w) AS m
             GROUP BY m.status) AS moved
     WHERE c.status = moved.status AND moved.delta <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER inbox_count_update AFTER UPDATE ON inbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_count_moves();

-- Fresh events claimed under (claimer, claimer_gen), up to cap, in id order: one row per event (applied, then the
-- event's columns as the core's _EVENT_COLUMNS), or one row of NULLs after applied when nothing was claimed.
-- applied is false when the shared path must run (nothing was written).
CREATE FUNCTION inbox_claim_fresh(lock_key BIGINT, channel TEXT, claimer TEXT, claimer_gen BIGINT, now BIGINT,
                                  cap BIGINT)
    RETURNS TABLE (applied BOOLEAN, e_id BIGINT, e_source TEXT, e_source_id TEXT, e_payload TEXT, e_status TEXT,
                   e_attempts BIGINT, e_claim_gen BIGINT, e_error TEXT, e_created_at BIGINT, e_updated_at BIGINT,
                   e_next_attempt_at BIGINT, e_duplicates BIGINT, e_pruned_at BIGINT, e_dead_reason TEXT,
                   e_trace TEXT, e_failed_with BIGINT)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    -- Anything to see to? (fresh, a due or hand retry, a run lost by an older generation, a move mark)
    IF NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.attempts = 0 AND i.claim_alone = 0)
       AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.attempts > 0
                                              AND i.next_attempt_at <= now)
       AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'pending' AND i.claim_alone = 1)
       AND NOT EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'running' AND i.claim_gen < claimer_gen)
       AND NOT EXISTS (SELECT 1 FROM move_mark m WHERE m.one = 1) THEN
        RETURN QUERY SELECT true, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                            NULL::BIGINT, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
                            NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
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
        RETURN QUERY SELECT false, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                            NULL::BIGINT, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
                            NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
        RETURN;
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE inbox i SET status = 'running', attempts = i.attempts + 1, claim_gen = claimer_gen, updated_at = now,
                           claim_alone = 0, failed_with = NULL
         WHERE i.id IN (SELECT f.id FROM inbox f WHERE f.status = 'pending' AND f.attempts = 0 AND f.claim_alone = 0
                         ORDER BY f.id LIMIT cap)
        RETURNING i.id, i.source, i.source_id, i.payload, i.status, i.attempts, i.claim_gen, i.error, i.created_at,
                  i.updated_at, i.next_attempt_at, i.duplicates, i.pruned_at, i.dead_reason, i.trace, i.failed_with),
    logged AS (
        INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
        SELECT c.id, now, 'claim', claimer, claimer_gen, 'attempt ' || c.attempts FROM claimed c ORDER BY c.id)
    SELECT true, c.* FROM claimed c ORDER BY c.id;
    IF FOUND THEN
        PERFORM pg_notify(channel, '');
    ELSE
        RETURN QUERY SELECT true, NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                            NULL::BIGINT, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
                            NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::BIGINT;
    END IF;
END $$;

-- The finish of a run that succeeded and staged nothing: the events of ids still running under finisher_gen are done,
-- a history line each in the order of ids. (applied, events moved); applied is false when the lease or a move mark
-- refuses it (nothing was written: the shared path records the refused finish).
CREATE FUNCTION inbox_finish_done(lock_key BIGINT, channel TEXT, finisher TEXT, finisher_gen BIGINT, ids BIGINT[],
                                  now BIGINT)
    RETURNS TABLE (applied BOOLEAN, moved BIGINT)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    done_count BIGINT;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(lock_key);
    IF EXISTS (SELECT 1 FROM move_mark m WHERE m.one = 1)
       OR NOT EXISTS (SELECT 1 FROM lease l WHERE l.one = 1 AND l.holder = finisher AND l.gen = finisher_gen
                                              AND l.until >= now) THEN
        RETURN QUERY SELECT false, 0::BIGINT;
        RETURN;
    END IF;
    WITH done AS (
        UPDATE inbox i SET status = 'done', error = NULL, updated_at = now
         WHERE i.id = ANY(ids) AND i.status = 'running' AND i.claim_gen = finisher_gen
        RETURNING i.id),
    logged AS (
        INSERT INTO attempts (event_id, at, kind, holder, gen, detail)
        SELECT d.id, now, 'finish', finisher, finisher_gen, NULL
          FROM done d JOIN unnest(ids) WITH ORDINALITY AS given(id, n) ON given.id = d.id
         ORDER BY given.n)
    SELECT count(*) INTO done_count FROM done;
    IF done_count > 0 THEN
        PERFORM pg_notify(channel, '');
    END IF;
    RETURN QUERY SELECT true, done_count;
END $$;
