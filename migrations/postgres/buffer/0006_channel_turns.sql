-- Channels take turns at the main queue: among batches of the same priority, the next one
-- claimed is the oldest claimable batch of the channel served longest ago, so one channel's
-- flood cannot hold back another's messages. `last_turn` counts claims (0: never served);
-- a main batch's routing adds its channel.
CREATE TABLE buffer_channel_turns (
    channel   TEXT   PRIMARY KEY,
    last_turn BIGINT NOT NULL DEFAULT 0
);
INSERT INTO buffer_channel_turns (channel)
    SELECT DISTINCT channel FROM buffer_batches WHERE route = 'main';
-- Each channel's queued main batches in claim order, so a claim walks one channel at a time.
DROP INDEX buffer_batches_main_queue;
CREATE INDEX buffer_batches_main_queue ON buffer_batches (channel, priority, id)
    WHERE route = 'main' AND status = 'queued';
