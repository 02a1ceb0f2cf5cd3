-- Lanes: a row's lane orders claims. Lane 0 (interactive: an Accept, a
-- reply, a direct message, an inbound import, a small fan-out) is claimed
-- ahead of lane 1 (bulk: the deliveries of a large fan-out), so a write
-- that reaches a few inboxes never waits behind 100,000 deliveries of a
-- Delete or a backfill; a share of every claim still goes to bulk rows, so
-- they never starve (outbox.Queue's claim).
ALTER TABLE event_queue ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;

-- The due rows of lane 0 alone, so that finding them never walks the bulk
-- lane's due rows; bulk rows are found through event_queue_due and pay for
-- no second index.
CREATE INDEX event_queue_due_interactive ON event_queue (next_attempt_at) WHERE status = 'pending' AND lane = 0;
