-- Set once a batch's messages are journaled (`message.received`) and remembered as
-- episodes: a later attempt (after a stop, a crash or a retry) must not receive them again.
-- Work that finished was received (so was any that an operator queued again).
ALTER TABLE batches ADD COLUMN received INTEGER NOT NULL DEFAULT 0 CHECK (received IN (0, 1));
UPDATE batches SET received = 1
 WHERE retried > 0 OR status IN ('done', 'failed')
    OR id IN (SELECT batch_id FROM tasks WHERE status IN ('done', 'failed'));
