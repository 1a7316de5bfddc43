-- Each plugin's llm.complete use since its host started (owned by the plugin runtime's
-- LLM gate, read by `cairn status`).
CREATE TABLE plugin_llm_usage (
    plugin_id  TEXT    PRIMARY KEY,
    calls      INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    refused    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
