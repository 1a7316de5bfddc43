-- Memory on PostgreSQL, shared by every host on the database: entries (bi-temporal, with
-- a full-text column), their audit trail, vectors and the vector cache. Times are ms since
-- the Unix epoch. List columns (tags, refs, sources) hold JSON arrays as text.

CREATE TABLE memory_entries (
    seq           BIGINT   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            TEXT     NOT NULL UNIQUE,
    kind          TEXT     NOT NULL CHECK (kind IN ('episode', 'fact', 'core', 'reflection', 'procedure')),
    content       TEXT     NOT NULL,
    content_hash  TEXT     NOT NULL,
    category      TEXT     NOT NULL,
    agent_id      TEXT,
    user_id       TEXT,
    session_id    TEXT,
    importance    SMALLINT NOT NULL CHECK (importance BETWEEN 1 AND 10),
    tags          TEXT     NOT NULL DEFAULT '[]',
    issue_refs    TEXT     NOT NULL DEFAULT '[]',
    pr_refs       TEXT     NOT NULL DEFAULT '[]',
    sources       TEXT     NOT NULL DEFAULT '[]',
    subject       TEXT,
    predicate     TEXT,
    valid_from    BIGINT   NOT NULL,
    valid_to      BIGINT,
    recorded_at   BIGINT   NOT NULL,
    superseded_by TEXT,
    forgotten_at  BIGINT,
    -- Content weighs twice the tags (weights A and B), as in SQLite's bm25(1.0, 0.5).
    fts           TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, content), 'A') ||
        setweight(to_tsvector('english'::regconfig, tags), 'B')
    ) STORED
);
CREATE INDEX memory_entries_fts ON memory_entries USING GIN (fts);
CREATE INDEX memory_entries_user ON memory_entries (user_id, recorded_at);
CREATE INDEX memory_entries_session ON memory_entries (session_id, seq);
CREATE INDEX memory_entries_kind ON memory_entries (kind, recorded_at);
CREATE INDEX memory_entries_hash ON memory_entries (content_hash);
CREATE INDEX memory_entries_subject ON memory_entries (subject, predicate) WHERE subject IS NOT NULL;

-- Every forget, purge, supersede, rescore and edit, with who did it.
CREATE TABLE memory_audit (
    seq      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entry_id TEXT   NOT NULL,
    action   TEXT   NOT NULL,
    actor    TEXT   NOT NULL,
    at       BIGINT NOT NULL,
    detail   TEXT
);
CREATE INDEX memory_audit_entry ON memory_audit (entry_id, seq);

-- One vector per entry (int8 with its scale, as on SQLite), from the model that made it.
-- `saved` numbers saves in commit order (from `memory_vector_head`), so each host's
-- in-memory index catches up on the vectors other hosts saved without missing one.
CREATE TABLE memory_embeddings (
    entry_seq BIGINT  PRIMARY KEY REFERENCES memory_entries (seq) ON DELETE CASCADE,
    provider  TEXT    NOT NULL,
    model     TEXT    NOT NULL,
    dims      INTEGER NOT NULL,
    vector    BYTEA   NOT NULL,
    saved     BIGINT  NOT NULL
);
CREATE INDEX memory_embeddings_saved ON memory_embeddings (saved);

-- The last `saved` number handed out; a save locks this row until it commits.
CREATE TABLE memory_vector_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last BIGINT  NOT NULL
);
INSERT INTO memory_vector_head (id, last) VALUES (1, 0);

-- Vectors by content hash, so equal text is embedded once; least recently used go first.
CREATE TABLE memory_embedding_cache (
    content_hash TEXT   NOT NULL,
    provider     TEXT   NOT NULL,
    model        TEXT   NOT NULL,
    vector       BYTEA  NOT NULL,
    last_used    BIGINT NOT NULL,
    PRIMARY KEY (content_hash, provider, model)
);
CREATE INDEX memory_embedding_cache_lru ON memory_embedding_cache (last_used);

-- Maintenance bookkeeping (retention's last run).
CREATE TABLE memory_maintenance (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
