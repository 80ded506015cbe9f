-- Provenance (issue 18): the twin of schema/0015_provenance.sql (see there for what each origin holds).
ALTER TABLE approvals ADD COLUMN origin TEXT;
ALTER TABLE memory ADD COLUMN origin TEXT;
ALTER TABLE timers ADD COLUMN origin TEXT;

-- Notes and timers a run left before provenance was kept: trusted only when filed under the owner's chat.
UPDATE memory SET origin = (
    SELECT json_build_object('trusted', i.source = 'chat', 'event_id', i.id, 'source', i.source,
                             'source_id', i.source_id, 'tainted_by',
                             CASE WHEN i.source = 'chat' THEN json_build_array()
                             ELSE json_build_array('written before provenance was kept, by a ' || i.source ||
                                                   ' run #' || i.id) END)::text
    FROM inbox i WHERE i.id = memory.event_id)
WHERE event_id IS NOT NULL;
UPDATE memory SET origin = json_build_object('trusted', false, 'event_id', event_id, 'source', NULL,
                                             'source_id', NULL, 'tainted_by',
                                             json_build_array('written before provenance was kept, by run #'
                                                              || event_id))::text
WHERE event_id IS NOT NULL AND origin IS NULL;

UPDATE timers SET origin = (
    SELECT json_build_object('trusted', i.source = 'chat', 'event_id', i.id, 'source', i.source,
                             'source_id', i.source_id, 'tainted_by',
                             CASE WHEN i.source = 'chat' THEN json_build_array()
                             ELSE json_build_array('set before provenance was kept, by a ' || i.source ||
                                                   ' run #' || i.id) END)::text
    FROM inbox i WHERE i.id = (timers.payload::jsonb ->> 'set_by_event')::bigint)
WHERE jsonb_typeof(payload::jsonb -> 'set_by_event') = 'number';
UPDATE timers SET origin = json_build_object('trusted', false, 'event_id', payload::jsonb -> 'set_by_event',
                                             'source', NULL, 'source_id', NULL, 'tainted_by',
                                             json_build_array('set before provenance was kept, by run #' ||
                                                              (payload::jsonb ->> 'set_by_event')))::text
WHERE origin IS NULL AND jsonb_typeof(payload::jsonb -> 'set_by_event') = 'number';
