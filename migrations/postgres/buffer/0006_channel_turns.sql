-- Channels take turns at the main queue: among batches of the same priority, the next one
-- claimed is the oldest claimable batch of the channel served longest ago, so one channel's
-- flood cannot hold back another's messages. `last_turn` counts claims; a channel with no
-- row was never served, and goes first.
CREATE TABLE buffer_channel_turns (
    channel   TEXT   PRIMARY KEY,
    last_turn BIGINT NOT NULL
);
-- Each channel's queued main batches in claim order, so a claim finds the channels with
-- queued batches and walks each one's queue on one index.
DROP INDEX buffer_batches_main_queue;
CREATE INDEX buffer_batches_main_queue ON buffer_batches (channel, priority, id)
    WHERE route = 'main' AND status = 'queued';
