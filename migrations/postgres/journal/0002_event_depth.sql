-- How many plugin emits led to an event (see the SQLite journal's 0002).
ALTER TABLE journal_events ADD COLUMN depth integer NOT NULL DEFAULT 0;
