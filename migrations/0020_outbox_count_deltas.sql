-- Enqueue counts the rows it inserts (package outbox): each enqueue appends
-- one row per event type to event_queue_count_deltas, in its transaction,
-- instead of a trigger adding one per row to event_queue_counts. On
-- PostgreSQL the insert trigger was near a quarter of a one-event
-- enqueue's cost (see postgres/0020_outbox_count_deltas.sql); SQLite does
-- as PostgreSQL, so that both stores count alike. outbox.Queue.Stats sums both tables;
-- outbox.Queue.FoldCounts (the sweeper, every 5 s) moves the deltas into
-- event_queue_counts without changing a sum. Changes of status and deletes
-- are still counted by triggers; theirs now add to a count that may not
-- exist yet (its insert still in the deltas) instead of updating it.
CREATE TABLE event_queue_count_deltas (
    id     INTEGER PRIMARY KEY,
    status TEXT    NOT NULL,
    type   TEXT    NOT NULL,
    n      INTEGER NOT NULL
);

DROP TRIGGER event_queue_counts_insert;
DROP TRIGGER event_queue_counts_update;
DROP TRIGGER event_queue_counts_delete;

CREATE TRIGGER event_queue_counts_update AFTER UPDATE OF status, type ON event_queue
WHEN OLD.status IS NOT NEW.status OR OLD.type IS NOT NEW.type
BEGIN
    INSERT INTO event_queue_counts (status, type, shard, n) VALUES (OLD.status, OLD.type, 0, -1)
    ON CONFLICT (status, type, shard) DO UPDATE SET n = n - 1;
    INSERT INTO event_queue_counts (status, type, shard, n) VALUES (NEW.status, NEW.type, 0, 1)
    ON CONFLICT (status, type, shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_queue_counts_delete AFTER DELETE ON event_queue
BEGIN
    INSERT INTO event_queue_counts (status, type, shard, n) VALUES (OLD.status, OLD.type, 0, -1)
    ON CONFLICT (status, type, shard) DO UPDATE SET n = n - 1;
END;
