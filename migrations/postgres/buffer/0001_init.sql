-- The buffer on PostgreSQL: inbound messages, the batches routers made of them, and
-- spawned tasks, shared by every host on the database. Times are ms since the Unix epoch.
-- A running batch or task names the host that claimed it and until when its lease holds;
-- the host renews it while it works, and another host may take it over once it lapsed.

CREATE TABLE buffer_batches (
    id            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel       TEXT    NOT NULL,
    conversation  TEXT    NOT NULL,
    priority      BIGINT  NOT NULL,
    route         TEXT    NOT NULL CHECK (route IN ('main', 'spawn', 'drop')),
    rule          TEXT,
    message_count INTEGER NOT NULL CHECK (message_count >= 1),
    -- main: queued | running | done | failed; spawn: spawned (progress in tasks); drop: dropped
    status        TEXT    NOT NULL,
    reply         TEXT,
    error         TEXT,
    created_at    BIGINT  NOT NULL,
    started_at    BIGINT,
    finished_at   BIGINT,
    claimed_by    TEXT,
    lease_until   BIGINT
);
CREATE INDEX buffer_batches_main_queue ON buffer_batches (priority, id)
    WHERE route = 'main' AND status = 'queued';
CREATE INDEX buffer_batches_running ON buffer_batches (conversation, channel)
    WHERE status = 'running';
CREATE INDEX buffer_batches_retention ON buffer_batches (created_at)
    WHERE status IN ('done', 'failed', 'dropped', 'spawned');

CREATE TABLE buffer_messages (
    id                  BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel             TEXT    NOT NULL CHECK (channel <> ''),
    sender              TEXT    NOT NULL CHECK (sender <> ''),
    conversation        TEXT    NOT NULL CHECK (conversation <> ''),
    payload             TEXT    NOT NULL CHECK (jsonb_typeof(payload::jsonb) = 'object'),
    received_at         BIGINT  NOT NULL,
    said_at             BIGINT,
    priority            BIGINT  NOT NULL DEFAULT 100,
    priority_is_default BOOLEAN NOT NULL DEFAULT FALSE,
    dedup_key           TEXT,
    routed              BOOLEAN NOT NULL DEFAULT FALSE,
    batch_id            BIGINT  REFERENCES buffer_batches (id),
    CHECK ((NOT routed) = (batch_id IS NULL))
);
CREATE INDEX buffer_messages_unrouted ON buffer_messages (priority, id) WHERE NOT routed;
CREATE INDEX buffer_messages_retention ON buffer_messages (received_at) WHERE routed;
CREATE INDEX buffer_messages_batch ON buffer_messages (batch_id) WHERE batch_id IS NOT NULL;
CREATE UNIQUE INDEX buffer_messages_dedup ON buffer_messages (channel, dedup_key)
    WHERE dedup_key IS NOT NULL;

CREATE TABLE buffer_tasks (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id    BIGINT NOT NULL UNIQUE REFERENCES buffer_batches (id),
    status      TEXT   NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    result      TEXT,
    error       TEXT,
    created_at  BIGINT NOT NULL,
    started_at  BIGINT,
    finished_at BIGINT,
    claimed_by  TEXT,
    lease_until BIGINT
);
CREATE INDEX buffer_tasks_queued ON buffer_tasks (id) WHERE status = 'queued';

CREATE TABLE buffer_channel_priorities (
    channel  TEXT   PRIMARY KEY,
    priority BIGINT NOT NULL
);
