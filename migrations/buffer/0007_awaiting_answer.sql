-- The lifecycle keeps a session open while its conversation has a received main batch
-- unanswered, and for a session timeout after the answer (until the session has recorded
-- it). This finds those batches by status, and the answered ones by when, without reading
-- every batch kept.
CREATE INDEX batches_main_status ON batches (status, finished_at) WHERE route = 'main';
