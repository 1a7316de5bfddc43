-- One session table for the whole host: the lifecycle's idle bookkeeping (until now in
-- host.db's `lifecycle_sessions`) joins the consolidation state here, and transcripts get a
-- table of their own, one row per event, so recording activity appends a row instead of
-- rewriting the whole transcript.
-- States: active → ended (idle) or pending (its user started another session) →
-- consolidated.
CREATE TABLE sessions_v4 (
    id              TEXT    PRIMARY KEY,
    conversation    TEXT,
    user_id         TEXT,
    agent_id        TEXT,
    state           TEXT    NOT NULL CHECK (state IN ('active', 'ended', 'pending', 'consolidated')),
    started_at      INTEGER NOT NULL,
    last_activity   INTEGER,
    ended_at        INTEGER,
    end_reason      TEXT,
    consolidated_at INTEGER,
    last_seq        INTEGER
);
INSERT INTO sessions_v4 (id, conversation, user_id, agent_id, state, started_at, last_activity,
                         ended_at, consolidated_at)
    SELECT id, conversation, user_id, agent_id, state, started_at, last_activity, ended_at,
           consolidated_at
    FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_v4 RENAME TO sessions;
CREATE INDEX sessions_waiting ON sessions (ended_at) WHERE state IN ('ended', 'pending');
CREATE INDEX sessions_active ON sessions (last_activity) WHERE state = 'active';
CREATE INDEX sessions_conversation ON sessions (conversation, started_at);
CREATE INDEX sessions_user ON sessions (user_id, state);

-- The last entries of each session's transcript, by the journal seq of their event.
CREATE TABLE session_transcript (
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    entry      TEXT    NOT NULL CHECK (json_valid(entry)),
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
