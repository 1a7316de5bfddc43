-- A key the producer gives a message (e.g. GitHub's X-GitHub-Delivery): a second push of
-- the same key on the same channel stores nothing and answers the first message's id.
ALTER TABLE messages ADD COLUMN dedup_key TEXT;
CREATE UNIQUE INDEX messages_dedup ON messages (channel, dedup_key) WHERE dedup_key IS NOT NULL;

-- 1 when the message's priority is its channel's default rather than one the producer or
-- buffer.channel_priority set, so a host that knows the channel's manifest can correct it.
ALTER TABLE messages ADD COLUMN priority_is_default INTEGER NOT NULL DEFAULT 0
    CHECK (priority_is_default IN (0, 1));

-- The channel priorities declared by the manifests of the last host that ran on this data
-- dir, so `cairn send` applies them while no host runs.
CREATE TABLE channel_priorities (
    channel  TEXT    PRIMARY KEY,
    priority INTEGER NOT NULL
);
