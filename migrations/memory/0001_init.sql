-- Agent memory: entries (bi-temporal), sessions, full-text index, embeddings, audit.

CREATE TABLE entries (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    kind          TEXT NOT NULL CHECK (kind IN ('episode', 'fact', 'core', 'reflection', 'procedure')),
    content       TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    category      TEXT NOT NULL,
    agent_id      TEXT,
    user_id       TEXT,
    session_id    TEXT,
    importance    INTEGER NOT NULL CHECK (importance BETWEEN 1 AND 10),
    tags          TEXT NOT NULL DEFAULT '[]',
    issue_refs    TEXT NOT NULL DEFAULT '[]',
    pr_refs       TEXT NOT NULL DEFAULT '[]',
    sources       TEXT NOT NULL DEFAULT '[]',
    subject       TEXT,
    predicate     TEXT,
    valid_from    INTEGER NOT NULL,
    valid_to      INTEGER,
    recorded_at   INTEGER NOT NULL,
    superseded_by TEXT,
    forgotten_at  INTEGER
);
CREATE INDEX entries_user ON entries (user_id, recorded_at);
CREATE INDEX entries_session ON entries (session_id, seq);
CREATE INDEX entries_kind ON entries (kind, recorded_at);
CREATE INDEX entries_hash ON entries (content_hash);
CREATE INDEX entries_subject ON entries (subject, predicate) WHERE subject IS NOT NULL;

CREATE VIRTUAL TABLE entries_fts USING fts5(
    content, tags, content = 'entries', content_rowid = 'seq', tokenize = 'porter unicode61'
);
CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, content, tags) VALUES (new.seq, new.content, new.tags);
END;
CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, content, tags) VALUES ('delete', old.seq, old.content, old.tags);
END;
CREATE TRIGGER entries_fts_update AFTER UPDATE OF content, tags ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, content, tags) VALUES ('delete', old.seq, old.content, old.tags);
    INSERT INTO entries_fts (rowid, content, tags) VALUES (new.seq, new.content, new.tags);
END;

CREATE TABLE sessions (
    id              TEXT PRIMARY KEY,
    user_id         TEXT,
    agent_id        TEXT,
    started_at      INTEGER NOT NULL,
    ended_at        INTEGER,
    state           TEXT NOT NULL CHECK (state IN ('active', 'pending', 'consolidated')),
    consolidated_at INTEGER
);
CREATE INDEX sessions_pending ON sessions (ended_at) WHERE state = 'pending';

-- One vector per entry, from the provider and model that made it.
CREATE TABLE embeddings (
    entry_seq INTEGER PRIMARY KEY REFERENCES entries (seq) ON DELETE CASCADE,
    provider  TEXT NOT NULL,
    model     TEXT NOT NULL,
    dims      INTEGER NOT NULL,
    vector    BLOB NOT NULL
);

-- Vectors by content hash, so equal text is embedded once; least recently used go first.
CREATE TABLE embedding_cache (
    content_hash TEXT NOT NULL,
    provider     TEXT NOT NULL,
    model        TEXT NOT NULL,
    vector       BLOB NOT NULL,
    last_used    INTEGER NOT NULL,
    PRIMARY KEY (content_hash, provider, model)
);
CREATE INDEX embedding_cache_lru ON embedding_cache (last_used);

-- Every forget, purge and supersede, with who did it.
CREATE TABLE audit (
    seq      INTEGER PRIMARY KEY,
    entry_id TEXT NOT NULL,
    action   TEXT NOT NULL,
    actor    TEXT NOT NULL,
    at       INTEGER NOT NULL,
    detail   TEXT
);

-- Maintenance bookkeeping (hygiene's last run, ...).
CREATE TABLE maintenance (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
