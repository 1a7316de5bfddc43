-- The LLM response cache on PostgreSQL, shared by every host on the database: one
-- completion per request key (SHA-256 of provider, model and the whole request), evicted
-- least recently used first. Times are ms since the Unix epoch.

CREATE TABLE cache_responses (
    key        TEXT   PRIMARY KEY,
    completion TEXT   NOT NULL CHECK (jsonb_typeof(completion::jsonb) IS NOT NULL),
    created_at BIGINT NOT NULL,
    last_used  BIGINT NOT NULL,
    hits       BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX cache_responses_lru ON cache_responses (last_used, created_at);

-- Lookups since the cache was created: `hits` and `misses`.
CREATE TABLE cache_counters (
    name  TEXT   PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO cache_counters (name, value) VALUES ('hits', 0), ('misses', 0);
