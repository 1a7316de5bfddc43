-- The unfinished main batches of each conversation in order, so a claim finds the oldest
-- one of every conversation with a few index probes instead of comparing every queued batch
-- with every other (a claim took 36 ms at 900 queued batches, and grew with the square).
CREATE INDEX buffer_batches_conversation_heads ON buffer_batches (channel, conversation, id)
    WHERE route = 'main' AND status IN ('queued', 'running');
