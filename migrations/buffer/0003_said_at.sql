-- When a message was really said (ms since the Unix epoch), when its producer dated it
-- earlier than its arrival (`cairn send --at`, history replayed); NULL = when it arrived.
ALTER TABLE messages ADD COLUMN said_at INTEGER;
