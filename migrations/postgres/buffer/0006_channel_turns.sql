-- Channels take turns at each queue: among main batches of the same priority, the next one
-- claimed is the oldest claimable batch of the channel served longest ago, and likewise
-- among spawned tasks, so one channel's flood cannot hold back another's messages.
-- `last_turn` counts a queue's claims; a channel with no row was never served there, and
-- goes first.
CREATE TABLE buffer_channel_turns (
    queue     TEXT   NOT NULL CHECK (queue IN ('main', 'task')),
    channel   TEXT   NOT NULL,
    last_turn BIGINT NOT NULL,
    PRIMARY KEY (queue, channel)
);
-- Each channel's queued main batches in claim order, so a claim finds the channels with
-- queued batches and walks each one's queue on one index.
DROP INDEX buffer_batches_main_queue;
CREATE INDEX buffer_batches_main_queue ON buffer_batches (channel, priority, id)
    WHERE route = 'main' AND status = 'queued';
-- A task carries its batch's channel, so its queue is walked per channel the same way.
ALTER TABLE buffer_tasks ADD COLUMN channel TEXT NOT NULL DEFAULT '';
UPDATE buffer_tasks t SET channel = b.channel FROM buffer_batches b WHERE b.id = t.batch_id;
DROP INDEX buffer_tasks_queued;
CREATE INDEX buffer_tasks_queued ON buffer_tasks (channel, id) WHERE status = 'queued';
