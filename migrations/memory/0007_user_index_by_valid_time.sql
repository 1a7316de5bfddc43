-- Recall of what was said in a span ("what happened last week?") reads a user's entries
-- newest first by valid time, so the user's index is ordered by valid time instead of by
-- save time, which no read is ordered or bounded by. A user's many entries are then a walk
-- that stops at the limit instead of a sort of them all.
DROP INDEX entries_user;
CREATE INDEX entries_user ON entries (user_id, valid_from);
