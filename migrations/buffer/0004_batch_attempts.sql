-- How many times a main batch was started: more than one means an earlier attempt was cut
-- short (its host died or stopped) and may have answered the batch already.
ALTER TABLE batches ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
