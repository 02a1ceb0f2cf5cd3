-- The transactional outbox and the processed-events ledger.
-- Times are Unix milliseconds written by Go (the clock lives in Go, not in SQL).

CREATE TABLE event_queue (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT UNIQUE,              -- UUID; nullable for rows from foreign writers
    type            TEXT    NOT NULL,
    target          TEXT,                     -- optional routing key (a delivery's host)
    payload         TEXT    NOT NULL,         -- JSON
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'processing', 'done', 'dead_lettered')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    claimed_at      INTEGER,
    last_error      TEXT,
    republished     INTEGER NOT NULL DEFAULT 0, -- times the JetStream consumer handed the event back (see outbox.Queue.HandBack)
    occurred_at     INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

-- Partial indexes: each row sits in the one index of its status, so a status
-- change touches two small indexes instead of rewriting entries of every
-- index (claiming and completing are the hot path), and done rows, the bulk
-- of the table, weigh on nothing but the retention sweep's index. The target
-- index leaves status out for the same reason: queries by host filter the
-- status from the row.
CREATE INDEX event_queue_due ON event_queue (next_attempt_at) WHERE status = 'pending';
CREATE INDEX event_queue_claimed ON event_queue (claimed_at) WHERE status = 'processing';
CREATE INDEX event_queue_done ON event_queue (updated_at) WHERE status = 'done';
CREATE INDEX event_queue_dead ON event_queue (id) WHERE status = 'dead_lettered';
CREATE INDEX event_queue_target ON event_queue (target) WHERE target IS NOT NULL;

CREATE TABLE processed_events (
    event_id     TEXT    NOT NULL,
    handler      TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('in_progress', 'done')),
    started_at   INTEGER NOT NULL,            -- the claim's owner token
    processed_at INTEGER,
    PRIMARY KEY (event_id, handler)
);

CREATE INDEX processed_events_started ON processed_events (started_at);
