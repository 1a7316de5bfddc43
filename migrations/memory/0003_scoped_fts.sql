-- Scope in the full-text index: each entry's agent, user and session become tokens
-- (`a<hex>`, `u<hex>`, `s<hex>`, or `anone`/`unone`/`snone` when unset), so a scoped recall
-- intersects the query's words with one user's postings instead of scoring every match of
-- every user. Hex keeps the tokens clear of the user's own words and of FTS syntax.
ALTER TABLE entries ADD COLUMN scope_tokens TEXT GENERATED ALWAYS AS (
    'a' || coalesce(lower(hex(agent_id)), 'none') || ' ' ||
    'u' || coalesce(lower(hex(user_id)), 'none') || ' ' ||
    's' || coalesce(lower(hex(session_id)), 'none')
) VIRTUAL;

DROP TRIGGER entries_fts_insert;
DROP TRIGGER entries_fts_delete;
DROP TRIGGER entries_fts_update;
DROP TABLE entries_fts;

CREATE VIRTUAL TABLE entries_fts USING fts5(
    content, tags, scope_tokens, content = 'entries', content_rowid = 'seq',
    tokenize = 'porter unicode61'
);
CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, content, tags, scope_tokens)
        VALUES (new.seq, new.content, new.tags, new.scope_tokens);
END;
CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, content, tags, scope_tokens)
        VALUES ('delete', old.seq, old.content, old.tags, old.scope_tokens);
END;
CREATE TRIGGER entries_fts_update AFTER UPDATE OF content, tags, agent_id, user_id, session_id ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, content, tags, scope_tokens)
        VALUES ('delete', old.seq, old.content, old.tags, old.scope_tokens);
    INSERT INTO entries_fts (rowid, content, tags, scope_tokens)
        VALUES (new.seq, new.content, new.tags, new.scope_tokens);
END;
INSERT INTO entries_fts (entries_fts) VALUES ('rebuild');
