-- The event journal on PostgreSQL, shared by every host on the database: events,
-- subscribers with durable cursors and the host delivering to each, dead letters.
-- Times are ms since the Unix epoch.

-- The last sequence number handed out. An append takes it under this row's lock, held
-- until its transaction commits, so events commit in sequence order: a reader that sees
-- event N committed can rely on every event before N being committed too.
CREATE TABLE journal_head (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    seq       BIGINT  NOT NULL
);
INSERT INTO journal_head (singleton, seq) VALUES (TRUE, 0);

CREATE TABLE journal_events (
    seq        BIGINT PRIMARY KEY,
    topic      TEXT   NOT NULL CHECK (topic <> ''),
    payload    TEXT   NOT NULL CHECK (jsonb_typeof(payload::jsonb) IS NOT NULL),
    source     TEXT   NOT NULL,
    session_id TEXT,
    agent_id   TEXT,
    user_id    TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX journal_events_topic ON journal_events (topic, seq);
CREATE INDEX journal_events_created ON journal_events (created_at);

-- One row per subscriber: the last event it consumed, and which host delivers to it until
-- when (a lease the host renews while it lives).
CREATE TABLE journal_subscribers (
    id          TEXT   PRIMARY KEY,
    patterns    TEXT   NOT NULL CHECK (jsonb_typeof(patterns::jsonb) = 'array'),
    cursor      BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    holder      TEXT,
    lease_until BIGINT
);

CREATE TABLE journal_dead_letters (
    id         BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber TEXT    NOT NULL,
    seq        BIGINT  NOT NULL,
    topic      TEXT    NOT NULL,
    error      TEXT    NOT NULL,
    attempts   INTEGER NOT NULL,
    -- dead: given up on; retry: an operator asked for one more delivery.
    status     TEXT    NOT NULL DEFAULT 'dead' CHECK (status IN ('dead', 'retry')),
    created_at BIGINT  NOT NULL,
    UNIQUE (subscriber, seq)
);
CREATE INDEX journal_dead_letters_retry ON journal_dead_letters (subscriber, seq)
    WHERE status = 'retry';
