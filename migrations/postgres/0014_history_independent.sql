-- PostgreSQL twin of ../0014_history_independent.sql: rows per (status,
-- type) kept on write by triggers, and indexes of the open (not done) rows,
-- so the scrape and the admin API do not grow with history.
CREATE TABLE event_queue_counts (
    status TEXT   NOT NULL,
    type   TEXT   NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (status, type)
);

INSERT INTO event_queue_counts (status, type, n)
SELECT status, type, COUNT(*) FROM event_queue GROUP BY status, type;

CREATE FUNCTION event_queue_counts_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE event_queue_counts SET n = n - 1 WHERE status = OLD.status AND type = OLD.type;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO event_queue_counts (status, type, n) VALUES (NEW.status, NEW.type, 1)
        ON CONFLICT (status, type) DO UPDATE SET n = event_queue_counts.n + 1;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER event_queue_counts_insert AFTER INSERT ON event_queue
FOR EACH ROW EXECUTE FUNCTION event_queue_counts_change();

CREATE TRIGGER event_queue_counts_update AFTER UPDATE OF status, type ON event_queue
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.type IS DISTINCT FROM NEW.type)
EXECUTE FUNCTION event_queue_counts_change();

CREATE TRIGGER event_queue_counts_delete AFTER DELETE ON event_queue
FOR EACH ROW EXECUTE FUNCTION event_queue_counts_change();

CREATE INDEX event_queue_open ON event_queue (status, id) WHERE status <> 'done';

CREATE INDEX event_queue_target_open ON event_queue (target, status, id)
WHERE status <> 'done' AND target IS NOT NULL;

CREATE INDEX delivery_targets_parked ON delivery_targets (parked_at) WHERE parked_at IS NOT NULL;
