-- buffer.db: inbound messages, the batches the router made of them, and spawned tasks.
-- Owned by the buffer module; times are ms since the Unix epoch.

CREATE TABLE batches (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    channel       TEXT    NOT NULL,
    conversation  TEXT    NOT NULL,
    priority      INTEGER NOT NULL,
    route         TEXT    NOT NULL CHECK (route IN ('main', 'spawn', 'drop')),
    rule          TEXT,
    message_count INTEGER NOT NULL CHECK (message_count >= 1),
    -- main: queued | running | done | failed; spawn: spawned (progress in tasks); drop: dropped
    status        TEXT    NOT NULL,
    reply         TEXT,
    error         TEXT,
    created_at    INTEGER NOT NULL,
    started_at    INTEGER,
    finished_at   INTEGER
);
CREATE INDEX batches_main_queue ON batches (priority, id) WHERE route = 'main' AND status = 'queued';
CREATE INDEX batches_retention ON batches (created_at) WHERE status IN ('done', 'failed', 'dropped', 'spawned');

CREATE TABLE messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    channel      TEXT    NOT NULL CHECK (channel <> ''),
    sender       TEXT    NOT NULL CHECK (sender <> ''),
    conversation TEXT    NOT NULL CHECK (conversation <> ''),
    payload      TEXT    NOT NULL CHECK (json_valid(payload)),
    received_at  INTEGER NOT NULL,
    priority     INTEGER NOT NULL DEFAULT 100,
    routed       INTEGER NOT NULL DEFAULT 0 CHECK (routed IN (0, 1)),
    batch_id     INTEGER REFERENCES batches (id),
    CHECK ((routed = 0) = (batch_id IS NULL))
);
CREATE INDEX messages_unrouted ON messages (priority, id) WHERE routed = 0;
CREATE INDEX messages_conversation ON messages (conversation, received_at);
CREATE INDEX messages_retention ON messages (received_at) WHERE routed = 1;
CREATE INDEX messages_batch ON messages (batch_id) WHERE batch_id IS NOT NULL;

CREATE TABLE tasks (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id    INTEGER NOT NULL UNIQUE REFERENCES batches (id),
    status      TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    result      TEXT,
    error       TEXT,
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER
);
CREATE INDEX tasks_queued ON tasks (id) WHERE status = 'queued';
