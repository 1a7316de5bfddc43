-- Channels take turns at the main queue: among batches of the same priority, the next one
-- claimed is the oldest of the channel served longest ago, so one channel's flood cannot
-- hold back another's messages. `last_turn` counts claims; a channel with no row was never
-- served, and goes first.
CREATE TABLE channel_turns (
    channel   TEXT    PRIMARY KEY,
    last_turn INTEGER NOT NULL
);
-- Each channel's queued main batches in claim order, so a claim reads one row per channel.
DROP INDEX batches_main_queue;
CREATE INDEX batches_main_queue ON batches (channel, priority, id)
    WHERE route = 'main' AND status = 'queued';
