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
--
-- The triggers become statement triggers over the statement's transition
-- tables: a claim or a completion of a hundred rows writes one count per
-- (status, type) it changed instead of two per row. Rows whose status and
-- type did not change cancel out (+1 new, -1 old), so an UPDATE that leaves
-- them alone writes nothing.
ALTER TABLE event_queue_counts ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE event_queue_counts ALTER COLUMN shard DROP DEFAULT;
ALTER TABLE event_queue_counts DROP CONSTRAINT event_queue_counts_pkey;
ALTER TABLE event_queue_counts ADD PRIMARY KEY (status, type, shard);

DROP TRIGGER event_queue_counts_insert ON event_queue;
DROP TRIGGER event_queue_counts_update ON event_queue;
DROP TRIGGER event_queue_counts_delete ON event_queue;
DROP FUNCTION event_queue_counts_change();

CREATE FUNCTION event_queue_counts_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_queue_counts (status, type, shard, n)
    SELECT status, type, pg_backend_pid(), COUNT(*) FROM new_rows GROUP BY status, type
    ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + EXCLUDED.n;
    RETURN NULL;
END;
$$;

CREATE FUNCTION event_queue_counts_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_queue_counts (status, type, shard, n)
    SELECT status, type, pg_backend_pid(), SUM(d) FROM (
        SELECT status, type, 1 AS d FROM new_rows
        UNION ALL
        SELECT status, type, -1 AS d FROM old_rows
    ) AS changed
    GROUP BY status, type HAVING SUM(d) <> 0
    ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + EXCLUDED.n;
    RETURN NULL;
END;
$$;

CREATE FUNCTION event_queue_counts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_queue_counts (status, type, shard, n)
    SELECT status, type, pg_backend_pid(), -COUNT(*) FROM old_rows GROUP BY status, type
    ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + EXCLUDED.n;
    RETURN NULL;
END;
$$;

CREATE TRIGGER event_queue_counts_insert AFTER INSERT ON event_queue
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION event_queue_counts_insert();

CREATE TRIGGER event_queue_counts_update AFTER UPDATE ON event_queue
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION event_queue_counts_update();

CREATE TRIGGER event_queue_counts_delete AFTER DELETE ON event_queue
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION event_queue_counts_delete();
