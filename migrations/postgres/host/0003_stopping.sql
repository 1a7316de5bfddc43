-- When each host began stopping (ms since the Unix epoch), while it stops: `cairn status`
-- says "stopping" rather than "running" for the up to 40 s a stop may take.
ALTER TABLE host_runs ADD COLUMN stopping_at BIGINT;
