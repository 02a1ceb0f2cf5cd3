-- Large event payloads live beside their outbox rows, keyed by the row id.
-- Claiming and settling rewrite a row twice on the hot path (pending ->
-- processing -> done), and SQLite rewrites every page that holds a changed
-- row: with a 1 KB activity inline, a batch of status changes writes several
-- times the pages it would with narrow rows. Enqueue stores a payload larger
-- than outbox.InlinePayload here and '' in event_queue.payload ('' is not
-- JSON, so it cannot be mistaken for a payload); small payloads (deliveries,
-- inbound events) stay inline. Rows written by other programs keep their
-- payload inline and are read as before. The view event_queue_payloads shows
-- every row with its payload wherever it lives, for people and tests.

-- For the same reason, done rows keep no index of their own: completing a row
-- (the hot path) no longer writes one. The retention sweep walks the table in
-- id order instead, from the oldest row to the first one created within the
-- retention (outbox.Queue.Sweep).
DROP INDEX IF EXISTS event_queue_done;

CREATE TABLE event_payloads (
    id      INTEGER PRIMARY KEY,              -- event_queue.id
    payload TEXT    NOT NULL                  -- JSON
);

-- A row's payload goes with the row (retention sweep, admin discard, manual
-- deletes).
CREATE TRIGGER event_payloads_delete AFTER DELETE ON event_queue
WHEN OLD.payload = ''
BEGIN
    DELETE FROM event_payloads WHERE id = OLD.id;
END;

CREATE VIEW event_queue_payloads AS
SELECT q.id, q.event_id, q.type, q.target,
       CASE WHEN q.payload = '' THEN COALESCE((SELECT p.payload FROM event_payloads p WHERE p.id = q.id), '')
            ELSE q.payload END AS payload,
       q.status, q.attempts, q.next_attempt_at, q.claimed_at, q.last_error, q.republished,
       q.occurred_at, q.created_at, q.updated_at
FROM event_queue q;
