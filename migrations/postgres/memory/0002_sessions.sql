-- Conversation sessions on PostgreSQL, shared by every host on the database: one row per
-- stretch of a conversation (`<conversation>`, then `<conversation>#2`, `#3`, …) with its
-- place in the lifecycle, and the last entries of its transcript. Times are ms since the
-- Unix epoch.
-- States: active → ended (idle) or pending (its user started another session) →
-- consolidated.

CREATE TABLE memory_sessions (
    id              TEXT    PRIMARY KEY,
    conversation    TEXT,
    user_id         TEXT,
    agent_id        TEXT,
    state           TEXT    NOT NULL CHECK (state IN ('active', 'ended', 'pending', 'consolidated')),
    started_at      BIGINT  NOT NULL,
    last_activity   BIGINT,
    ended_at        BIGINT,
    end_reason      TEXT,
    consolidated_at BIGINT,
    -- The journal seq of the last event recorded in the transcript (replays are skipped).
    last_seq        BIGINT,
    -- The order rows were inserted in (SQLite's rowid): of a conversation's sessions
    -- started in the same ms, the last inserted is its current one.
    row_order       BIGINT  GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX memory_sessions_waiting ON memory_sessions (ended_at)
    WHERE state IN ('ended', 'pending');
CREATE INDEX memory_sessions_active ON memory_sessions (last_activity) WHERE state = 'active';
CREATE INDEX memory_sessions_conversation ON memory_sessions (conversation, started_at);
CREATE INDEX memory_sessions_user ON memory_sessions (user_id, state);

-- The last entries of each session's transcript, by the journal seq of their event. An
-- entry is JSON text (checked as `json`, which unlike `jsonb` accepts any valid JSON text,
-- `\u0000` escapes included).
CREATE TABLE memory_session_transcript (
    session_id TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    entry      TEXT   NOT NULL CHECK (json_typeof(entry::json) IS NOT NULL),
    PRIMARY KEY (session_id, seq)
);
