-- An operator's move of the cursor not yet seen by the delivering host (see the SQLite
-- journal's 0003).
ALTER TABLE journal_subscribers ADD COLUMN rewound INTEGER NOT NULL DEFAULT 0;
