-- Lifecycle state (owned by the lifecycle module).

-- Conversation sessions as the session monitor sees them.
CREATE TABLE lifecycle_sessions (
    id            TEXT    PRIMARY KEY,
    user_id       TEXT,
    state         TEXT    NOT NULL CHECK (state IN ('active', 'ended', 'pending')),
    started_at    INTEGER NOT NULL,
    last_activity INTEGER NOT NULL,
    ended_at      INTEGER,
    end_reason    TEXT,
    last_seq      INTEGER NOT NULL,
    transcript    TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(transcript))
);
CREATE INDEX lifecycle_sessions_active ON lifecycle_sessions (last_activity) WHERE state = 'active';
CREATE INDEX lifecycle_sessions_user ON lifecycle_sessions (user_id, state);

-- Small named values: `asleep`, `interrupted`, `last_activity`.
CREATE TABLE lifecycle_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- When each manifest schedule last fired.
CREATE TABLE schedule_state (
    plugin_id     TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    last_fired_at INTEGER NOT NULL,
    PRIMARY KEY (plugin_id, name)
);
