-- journal.db: the append-only event journal, subscriber cursors and dead letters.
-- Owned by the journal module; times are ms since the Unix epoch.

CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    topic      TEXT    NOT NULL CHECK (topic <> ''),
    payload    TEXT    NOT NULL CHECK (json_valid(payload)),
    source     TEXT    NOT NULL,
    session_id TEXT,
    agent_id   TEXT,
    user_id    TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX events_topic ON events (topic, seq);
CREATE INDEX events_created ON events (created_at);

-- One row per subscriber: the last event it has consumed (delivered or dead-lettered).
CREATE TABLE subscribers (
    id         TEXT    PRIMARY KEY,
    patterns   TEXT    NOT NULL CHECK (json_valid(patterns)),
    cursor     INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

CREATE TABLE dead_letters (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    subscriber TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    topic      TEXT    NOT NULL,
    error      TEXT    NOT NULL,
    attempts   INTEGER NOT NULL,
    -- dead: given up on; retry: an operator asked for one more delivery.
    status     TEXT    NOT NULL DEFAULT 'dead' CHECK (status IN ('dead', 'retry')),
    created_at INTEGER NOT NULL,
    UNIQUE (subscriber, seq)
);
CREATE INDEX dead_letters_retry ON dead_letters (subscriber, seq) WHERE status = 'retry';
