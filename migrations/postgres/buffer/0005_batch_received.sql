-- When the attempt that received a batch began (ms): its messages were then journaled
-- (`message.received`) and remembered as episodes, so a later attempt (after a stop, a
-- crash or a retry) does not receive them again, and reads the conversation's history as it
-- stood before them. NULL until received. Work that finished was received (so was any an
-- operator queued again); its routing time stands in for when.
ALTER TABLE buffer_batches ADD COLUMN received_at BIGINT;
UPDATE buffer_batches SET received_at = created_at
 WHERE retried > 0 OR status IN ('done', 'failed')
    OR id IN (SELECT batch_id FROM buffer_tasks WHERE status IN ('done', 'failed'));
