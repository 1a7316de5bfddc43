-- Sessions belong to a conversation; a conversation that resumes after its session ended
-- starts a new session (`<channel>:<conversation>#2`, ...).
ALTER TABLE sessions ADD COLUMN conversation TEXT;
ALTER TABLE sessions ADD COLUMN last_activity INTEGER;
UPDATE sessions SET conversation = id, last_activity = coalesce(ended_at, started_at);
CREATE INDEX sessions_conversation ON sessions (conversation, started_at);
