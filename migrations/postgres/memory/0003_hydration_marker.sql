-- Memory that remembers nothing awaits its first hydration from MEMORY_SNAPSHOT.md until a
-- host records it done: a start killed before then hydrates on the next one.
INSERT INTO memory_maintenance (key, value)
SELECT 'hydration', 'pending'
WHERE NOT EXISTS (SELECT 1 FROM memory_entries);
