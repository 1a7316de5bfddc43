-- A memory.db that remembers nothing awaits its first hydration from MEMORY_SNAPSHOT.md until
-- the host records it done: a start killed before then hydrates on the next one, instead of
-- taking the half-made database for memory that was always empty.
INSERT INTO maintenance (key, value)
SELECT 'hydration', 'pending'
WHERE NOT EXISTS (SELECT 1 FROM entries);
