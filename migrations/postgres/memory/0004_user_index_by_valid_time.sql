-- Recall of what was said in a span reads a user's entries newest first by valid time (see
-- the SQLite store's migration 0007): the user's index is ordered by it.
DROP INDEX memory_entries_user;
CREATE INDEX memory_entries_user ON memory_entries (user_id, valid_from);
