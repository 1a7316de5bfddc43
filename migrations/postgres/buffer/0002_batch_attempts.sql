-- How many times a main batch was claimed: more than one means an earlier attempt was cut
-- short (its host died, stopped or let the lease lapse) and may have answered the batch
-- already.
ALTER TABLE buffer_batches ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
