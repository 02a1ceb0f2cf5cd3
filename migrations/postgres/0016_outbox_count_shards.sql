-- PostgreSQL twin of ../0016_outbox_count_shards.sql: the outbox counts get
-- a shard, and each database backend counts in the shard of its process id.
-- With one row per (status, type), every transaction that enqueued, claimed
-- or settled rows of a type held that row's lock until it committed, so the
-- concurrent writers of a type ran one after another (and two of them could
-- deadlock, taking the rows of two statuses in opposite orders). No two live
-- backends share a shard, so no writer waits for another's counts. A
-- backend's shard may go negative (it settled rows another one enqueued);
-- outbox.Queue.Stats sums the shards, and the sweep folds the shards of
-- backends that have ended into shard 0.
ALTER TABLE event_queue_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE event_queue_counts ALTER COLUMN shard DROP DEFAULT;
ALTER TABLE event_queue_counts DROP CONSTRAINT event_queue_counts_pkey;
ALTER TABLE event_queue_counts ADD PRIMARY KEY (status, type, shard);

CREATE OR REPLACE FUNCTION event_queue_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s INTEGER := pg_backend_pid();
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO event_queue_counts (status, type, shard, n) VALUES (OLD.status, OLD.type, s, -1)
        ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n - 1;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO event_queue_counts (status, type, shard, n) VALUES (NEW.status, NEW.type, s, 1)
        ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + 1;
    END IF;
    RETURN NULL;
END;
$$;
