-- Channels take turns at each queue: among main batches of the same priority, the next one
-- claimed is the oldest of the channel served longest ago, and likewise among spawned tasks,
-- so one channel's flood cannot hold back another's messages. `last_turn` counts a queue's
-- claims; a channel with no row was never served there, and goes first.
CREATE TABLE channel_turns (
    queue     TEXT    NOT NULL CHECK (queue IN ('main', 'task')),
    channel   TEXT    NOT NULL,
    last_turn INTEGER NOT NULL,
    PRIMARY KEY (queue, channel)
);
-- Each channel's queued main batches in claim order, so a claim reads one row per channel.
DROP INDEX batches_main_queue;
CREATE INDEX batches_main_queue ON batches (channel, priority, id)
    WHERE route = 'main' AND status = 'queued';
-- A task carries its batch's channel, so its queue is walked per channel the same way.
ALTER TABLE tasks ADD COLUMN channel TEXT NOT NULL DEFAULT '';
UPDATE tasks SET channel = (SELECT b.channel FROM batches b WHERE b.id = tasks.batch_id);
DROP INDEX tasks_queued;
CREATE INDEX tasks_queued ON tasks (channel, id) WHERE status = 'queued';
