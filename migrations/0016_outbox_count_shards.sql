-- The outbox counts of migration 0014 get a shard column, in step with
-- PostgreSQL: there every transaction that enqueues, claims or settles rows
-- of a type updates the counter rows of that type, and a counter row stays
-- locked until its transaction commits, so one row per (status, type) made
-- every concurrent writer of a type wait for the others. On PostgreSQL each
-- database backend counts in a shard of its own (its process id); on SQLite,
-- whose writers run one at a time anyway, every count is in shard 0.
-- outbox.Queue.Stats sums the shards.
CREATE TABLE event_queue_counts_sharded (
    status TEXT    NOT NULL,
    type   TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    shard  INTEGER NOT NULL,
    PRIMARY KEY (status, type, shard)
) WITHOUT ROWID;

INSERT INTO event_queue_counts_sharded (status, type, n, shard)
SELECT status, type, n, 0 FROM event_queue_counts;

DROP TRIGGER event_queue_counts_insert;
DROP TRIGGER event_queue_counts_update;
DROP TRIGGER event_queue_counts_delete;
DROP TABLE event_queue_counts;
ALTER TABLE event_queue_counts_sharded RENAME TO event_queue_counts;

CREATE TRIGGER event_queue_counts_insert AFTER INSERT ON event_queue
BEGIN
    INSERT INTO event_queue_counts (status, type, shard, n) VALUES (NEW.status, NEW.type, 0, 1)
    ON CONFLICT (status, type, shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_queue_counts_update AFTER UPDATE OF status, type ON event_queue
WHEN OLD.status IS NOT NEW.status OR OLD.type IS NOT NEW.type
BEGIN
    UPDATE event_queue_counts SET n = n - 1 WHERE status = OLD.status AND type = OLD.type AND shard = 0;
    INSERT INTO event_queue_counts (status, type, shard, n) VALUES (NEW.status, NEW.type, 0, 1)
    ON CONFLICT (status, type, shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER event_queue_counts_delete AFTER DELETE ON event_queue
BEGIN
    UPDATE event_queue_counts SET n = n - 1 WHERE status = OLD.status AND type = OLD.type AND shard = 0;
END;
