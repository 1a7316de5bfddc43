-- The lifecycle keeps a session open while its conversation has a received main batch
-- unanswered (queued again after a stop or a crash, or running): this finds those batches
-- by status without reading every batch kept.
CREATE INDEX batches_main_status ON batches (status) WHERE route = 'main';
