-- Fenced runs. Every write a run makes is checked against the lease, and every refused one is recorded
-- here (the table keeps its old name: a refused finish was the first kind). kind says which write was
-- refused: 'finish', 'step' (claiming a journal step) or 'commit' (committing a step's result); detail
-- names the step.
ALTER TABLE refused_finishes ADD COLUMN kind TEXT NOT NULL DEFAULT 'finish';
ALTER TABLE refused_finishes ADD COLUMN detail TEXT;
-- The event an approval belongs to (its id is anchored on it), so the same request for the same event
-- is the same row however the batch was cut, and the console can say what started it.
ALTER TABLE approvals ADD COLUMN event_id INTEGER;
