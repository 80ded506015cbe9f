-- Provenance (issue 18): what a run has read decides what it may do unasked, and whatever a run leaves behind
-- for later runs (a note, a timer) keeps where it came from, so that reading it later cannot launder it.
--
-- origin is JSON written by the agents' runtime (console/agents/provenance.py); the core only stores it.
--   approvals.origin: {"trusted": bool, "summary": "asked by a run that read untrusted content: ...",
--                      "tainted_by": [...]}: where the request came from, shown with every approval.
--   memory.origin, timers.origin: {"trusted": bool, "event_id", "source", "source_id", "tainted_by": [...]}:
--                      the run that wrote the note or set the timer. NULL: the owner's own (by hand).
ALTER TABLE approvals ADD COLUMN origin TEXT;
ALTER TABLE memory ADD COLUMN origin TEXT;
ALTER TABLE timers ADD COLUMN origin TEXT;

-- Notes and timers a run left before provenance was kept: their run's trust is taken from the source of the
-- event it was filed under. Only the owner's chat counts as trusted here: a timer's or an approval's run could
-- have been carrying text from outside (the laundering this migration closes), and nothing recorded says.
UPDATE memory SET origin = (
    SELECT json_object('trusted', json(CASE WHEN i.source = 'chat' THEN 'true' ELSE 'false' END),
                       'event_id', i.id, 'source', i.source, 'source_id', i.source_id,
                       'tainted_by', CASE WHEN i.source = 'chat' THEN json_array()
                                     ELSE json_array('written before provenance was kept, by a ' || i.source ||
                                                     ' run #' || i.id) END)
    FROM inbox i WHERE i.id = memory.event_id)
WHERE event_id IS NOT NULL;
UPDATE memory SET origin = json_object('trusted', json('false'), 'event_id', event_id, 'source', NULL,
                                       'source_id', NULL, 'tainted_by',
                                       json_array('written before provenance was kept, by run #' || event_id))
WHERE event_id IS NOT NULL AND origin IS NULL;

UPDATE timers SET origin = (
    SELECT json_object('trusted', json(CASE WHEN i.source = 'chat' THEN 'true' ELSE 'false' END),
                       'event_id', i.id, 'source', i.source, 'source_id', i.source_id,
                       'tainted_by', CASE WHEN i.source = 'chat' THEN json_array()
                                     ELSE json_array('set before provenance was kept, by a ' || i.source ||
                                                     ' run #' || i.id) END)
    FROM inbox i WHERE i.id = json_extract(timers.payload, '$.set_by_event'))
WHERE json_valid(payload) AND json_type(payload, '$.set_by_event') = 'integer';
UPDATE timers SET origin = json_object('trusted', json('false'), 'event_id', json_extract(payload, '$.set_by_event'),
                                       'source', NULL, 'source_id', NULL, 'tainted_by',
                                       json_array('set before provenance was kept, by run #' ||
                                                  json_extract(payload, '$.set_by_event')))
WHERE origin IS NULL AND json_valid(payload) AND json_type(payload, '$.set_by_event') = 'integer';
