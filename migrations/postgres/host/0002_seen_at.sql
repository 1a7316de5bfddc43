-- When each host last said it was alive (ms since the Unix epoch): a running host renews
-- it every few seconds, so `cairn status` can tell a host that died from one that runs.
ALTER TABLE host_runs ADD COLUMN seen_at BIGINT;
