-- Pruning clears the payload of an old finished event but keeps its row, so its (source, source_id)
-- still refuses a redelivery; pruned_at says when, so the detail view can tell "pruned" from a null payload.
ALTER TABLE inbox ADD COLUMN pruned_at INTEGER;
