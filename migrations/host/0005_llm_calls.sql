-- Each llm.complete call of the last hour, by plugin: when it started and the tokens it used.
-- The LLM gate seeds a plugin's hourly budget from it when a host starts, so a restart does
-- not give a plugin a fresh budget (owned by the plugin runtime's LLM gate).
CREATE TABLE plugin_llm_calls (
    plugin_id  TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    tokens     INTEGER NOT NULL
);
CREATE INDEX plugin_llm_calls_by_plugin ON plugin_llm_calls (plugin_id, started_at);
