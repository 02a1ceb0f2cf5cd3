-- What the scrape and the admin API read must not grow with history: with
-- millions of done rows (and their ledger and delivery records) a
-- GROUP BY over event_queue, or a count through an index that holds done
-- rows, takes seconds. Counts are kept on write, and the open rows (not
-- done) get indexes of their own that done rows never enter.

-- Rows per (status, type), kept by the triggers below in the transaction
-- that changes event_queue. outbox.Queue.Stats reads it.
CREATE TABLE event_queue_counts (
    status TEXT    NOT NULL,
    type   TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (status, type)
) WITHOUT ROWID;

INSERT INTO event_queue_counts (status, type, n)
SELECT status, type, COUNT(*) FROM event_queue GROUP BY status, type;

CREATE TRIGGER event_queue_counts_insert AFTER INSERT ON event_queue
BEGIN
    INSERT INTO event_queue_counts (status, type, n) VALUES (NEW.status, NEW.type, 1)
    ON CONFLICT (status, type) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_queue_counts_update AFTER UPDATE OF status, type ON event_queue
WHEN OLD.status IS NOT NEW.status OR OLD.type IS NOT NEW.type
BEGIN
    UPDATE event_queue_counts SET n = n - 1 WHERE status = OLD.status AND type = OLD.type;
    INSERT INTO event_queue_counts (status, type, n) VALUES (NEW.status, NEW.type, 1)
    ON CONFLICT (status, type) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_queue_counts_delete AFTER DELETE ON event_queue
BEGIN
    UPDATE event_queue_counts SET n = n - 1 WHERE status = OLD.status AND type = OLD.type;
END;

-- Open rows by status in id order: the admin lists by status (pending,
-- processing, stuck, dead_lettered) seek here instead of walking the table.
-- Queries name the index's condition (status <> 'done') so the planner may
-- use it (outbox.Filter).
CREATE INDEX event_queue_open ON event_queue (status, id) WHERE status <> 'done';

-- A host's open deliveries: what admin hosts counts (pending, dead-lettered)
-- and what the per-host controls release or drain.
CREATE INDEX event_queue_target_open ON event_queue (target, status, id)
WHERE status <> 'done' AND target IS NOT NULL;

-- Deliveries parked now (the scrape's courier_delivery_parked).
CREATE INDEX delivery_targets_parked ON delivery_targets (parked_at) WHERE parked_at IS NOT NULL;
