-- A batch-mate of a poison event (issue 21.6): the run failed and its agent named another event of the batch as
-- the cause, so this one kept its attempt and runs alone next. failed_with is that event's id, cleared when this
-- one is claimed again (what it shows, "failed with its batch (#N, poison); runs alone next", is over then).
ALTER TABLE inbox ADD COLUMN failed_with INTEGER;
