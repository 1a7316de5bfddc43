-- How many plugin emits led to an event: 0 for the host's and a plugin's own events, one
-- more than the event a plugin was handling when it emitted. The journal refuses a chain
-- past `journal.max_chain_depth`, so two plugins answering each other's events stop.
ALTER TABLE events ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
