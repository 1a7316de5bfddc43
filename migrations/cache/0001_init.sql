-- cache.db: completions kept by the LLM response cache (owned by cairn-storage's cache.rs).

-- One completion per request key (SHA-256 of provider, model and the whole request).
CREATE TABLE responses (
    key        TEXT    PRIMARY KEY,
    completion TEXT    NOT NULL CHECK (json_valid(completion)),
    created_at INTEGER NOT NULL,
    last_used  INTEGER NOT NULL,
    hits       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX responses_lru ON responses (last_used);

-- Lookups since the cache was created: `hits` and `misses`.
CREATE TABLE counters (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('hits', 0), ('misses', 0);
