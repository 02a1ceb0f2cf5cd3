-- PostgreSQL twin of ../0008_event_payloads.sql: large event payloads beside
-- their outbox rows. PostgreSQL would keep a large payload out of line by
-- itself (TOAST), but the outbox code reads one layout on both stores, and
-- narrow rows still make the claim and settle updates cheaper (every UPDATE
-- writes a new row version).

DROP INDEX IF EXISTS event_queue_done;

CREATE TABLE event_payloads (
    id      BIGINT PRIMARY KEY,
    payload TEXT   NOT NULL
);

CREATE FUNCTION event_payloads_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM event_payloads WHERE id = OLD.id;
    RETURN OLD;
END;
$$;

CREATE TRIGGER event_payloads_delete AFTER DELETE ON event_queue
FOR EACH ROW WHEN (OLD.payload = '')
EXECUTE FUNCTION event_payloads_delete();

CREATE VIEW event_queue_payloads AS
SELECT q.id, q.event_id, q.type, q.target,
       CASE WHEN q.payload = '' THEN COALESCE((SELECT p.payload FROM event_payloads p WHERE p.id = q.id), '')
            ELSE q.payload END AS payload,
       q.status, q.attempts, q.next_attempt_at, q.claimed_at, q.last_error, q.republished,
       q.occurred_at, q.created_at, q.updated_at
FROM event_queue q;
