-- Each llm.complete call of the last hour, by plugin, of every host on the database: when it
-- started and the tokens it used. A host seeds a plugin's hourly budget from it when it
-- starts, so a restart does not give a plugin a fresh budget.
CREATE TABLE host_llm_calls (
    plugin_id  TEXT   NOT NULL,
    started_at BIGINT NOT NULL,
    tokens     BIGINT NOT NULL
);
CREATE INDEX host_llm_calls_by_plugin ON host_llm_calls (plugin_id, started_at);
