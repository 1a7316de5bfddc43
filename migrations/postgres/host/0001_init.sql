-- The host's own state on PostgreSQL, for every host on the database. Times are ms since
-- the Unix epoch. Plugin key/value state, the sleep state and schedule ticks are the
-- agent's, shared by all hosts; each host records its run, its plugins' states and their
-- LLM use under its own host id.

-- Plugin-private key/value state.
CREATE TABLE host_kv (
    plugin_id  TEXT   NOT NULL,
    key        TEXT   NOT NULL,
    value      BYTEA  NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (plugin_id, key)
);

-- Each host's run: its process, the plugin directory it runs, when it started and when it
-- stopped cleanly (none while running or after a crash).
CREATE TABLE host_runs (
    host_id     TEXT   PRIMARY KEY,
    pid         BIGINT NOT NULL CHECK (pid >= 0),
    plugins_dir TEXT   NOT NULL,
    started_at  BIGINT NOT NULL,
    stopped_at  BIGINT
);
CREATE INDEX host_runs_started ON host_runs (started_at);

-- Last known state of each plugin of each host's run.
CREATE TABLE host_plugin_status (
    host_id    TEXT   NOT NULL,
    plugin_id  TEXT   NOT NULL,
    version    TEXT   NOT NULL,
    kind       TEXT   NOT NULL,
    state      TEXT   NOT NULL,
    restarts   BIGINT NOT NULL DEFAULT 0 CHECK (restarts >= 0),
    faults     BIGINT NOT NULL DEFAULT 0 CHECK (faults >= 0),
    last_error TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (host_id, plugin_id)
);

-- Each plugin's llm.complete use since its host started.
CREATE TABLE host_llm_usage (
    host_id    TEXT   NOT NULL,
    plugin_id  TEXT   NOT NULL,
    calls      BIGINT NOT NULL CHECK (calls >= 0),
    tokens     BIGINT NOT NULL CHECK (tokens >= 0),
    refused    BIGINT NOT NULL CHECK (refused >= 0),
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (host_id, plugin_id)
);

-- Small named lifecycle values: `asleep`, `interrupted`, `last_activity`.
CREATE TABLE host_lifecycle_state (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- When each manifest schedule last fired; a host claims a tick by moving it forward, so
-- each tick fires once across hosts.
CREATE TABLE host_schedule_state (
    plugin_id     TEXT   NOT NULL,
    name          TEXT   NOT NULL,
    last_fired_at BIGINT NOT NULL,
    PRIMARY KEY (plugin_id, name)
);
