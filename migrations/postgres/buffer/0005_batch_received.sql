-- Set once a batch's messages are journaled (`message.received`) and remembered as
-- episodes: a later attempt (after a stop, a crash or a retry) must not receive them again.
-- Work that finished was received (so was any that an operator queued again).
ALTER TABLE buffer_batches ADD COLUMN received BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE buffer_batches SET received = TRUE
 WHERE retried > 0 OR status IN ('done', 'failed')
    OR id IN (SELECT batch_id FROM buffer_tasks WHERE status IN ('done', 'failed'));
