-- How many times an operator queued a failed main batch (or its spawned task) again with
-- `cairn buffer retry`: more than 0 means its messages were received, journaled and
-- remembered already, so the retry only asks the model and delivers.
ALTER TABLE buffer_batches ADD COLUMN retried INTEGER NOT NULL DEFAULT 0;
