-- The W3C traceparent a delivery's `ingest` span had, kept when the sender sent one of its own: the run that
-- takes the event is traced under it, so it joins the sender's trace (console/telemetry.py).
ALTER TABLE inbox ADD COLUMN trace TEXT;
