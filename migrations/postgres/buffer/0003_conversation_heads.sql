-- Each conversation's unfinished main batches in order, so a claim checks whether a queued
-- batch is the oldest of its conversation with one index probe. Before it, the claim
-- compared every queued batch with every other: 16 ms at 1,000 queued batches in seven
-- conversations, 1.2 s at 10,000.
CREATE INDEX buffer_batches_conversation_heads ON buffer_batches (channel, conversation, id)
    WHERE route = 'main' AND status IN ('queued', 'running');
