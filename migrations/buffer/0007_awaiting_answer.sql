-- The lifecycle keeps a session open while its conversation has a message not answered yet
-- (in a main batch queued or running, or not routed yet): this finds those batches by
-- status without reading every batch kept.
CREATE INDEX batches_main_status ON batches (status) WHERE route = 'main';
