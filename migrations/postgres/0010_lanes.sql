-- PostgreSQL twin of ../0010_lanes.sql: a row's lane orders claims (0
-- interactive ahead of 1 bulk), with the interactive lane's due rows in an
-- index of their own.
ALTER TABLE event_queue ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;

CREATE INDEX event_queue_due_interactive ON event_queue (next_attempt_at) WHERE status = 'pending' AND lane = 0;
