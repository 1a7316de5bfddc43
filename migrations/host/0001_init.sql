-- host.db: state of the host process itself.

-- Plugin-private key/value state (owned by plugin::kv).
CREATE TABLE kv (
    plugin_id  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (plugin_id, key)
) WITHOUT ROWID;

-- Last known state of each plugin of the running (or last) host (owned by plugin::status).
CREATE TABLE plugin_status (
    plugin_id   TEXT    PRIMARY KEY,
    version     TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    restarts    INTEGER NOT NULL DEFAULT 0,
    faults      INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    updated_at  INTEGER NOT NULL
);

-- The host process that last ran on this data dir (owned by plugin::status).
CREATE TABLE host_run (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    pid         INTEGER NOT NULL,
    plugins_dir TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    stopped_at  INTEGER
);
