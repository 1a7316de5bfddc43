-- 1 from an operator's move of the cursor (`cairn journal replay`) until the host delivering
-- to the subscriber took notice: meanwhile that host's own cursor moves, decided before it
-- knew, are refused, so a replay is never overridden by a commit that follows it.
ALTER TABLE subscribers ADD COLUMN rewound INTEGER NOT NULL DEFAULT 0;
