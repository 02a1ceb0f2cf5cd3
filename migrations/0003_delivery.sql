-- Outgoing delivery: one row per (activity, inbox) the fan-out created, the
-- log of every delivery attempt, and the health of each remote host. Owned
-- by package delivery. Times are Unix milliseconds written by Go.

-- One row per delivery event (event_queue type 'delivery.post') the fan-out
-- enqueued, so the admin API can list an activity's deliveries inbox by
-- inbox. parked_at is set while the delivery waits for its host to come
-- back (cleared when the host recovers or the delivery is dead-lettered).
CREATE TABLE delivery_targets (
    event_id        TEXT    PRIMARY KEY,       -- the delivery event's id (outbox ChildID)
    parent_event_id TEXT    NOT NULL,          -- the activity.outgoing event
    activity_id     TEXT    NOT NULL,
    inbox           TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    parked_at       INTEGER,
    created_at      INTEGER NOT NULL
);

CREATE INDEX delivery_targets_activity ON delivery_targets (activity_id, inbox);
CREATE INDEX delivery_targets_host ON delivery_targets (host, parked_at);
CREATE INDEX delivery_targets_created ON delivery_targets (created_at);

-- Every delivery POST and every give-up, with its outcome.
CREATE TABLE delivery_attempts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     TEXT    NOT NULL,
    activity_id  TEXT    NOT NULL,
    inbox        TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    attempted_at INTEGER NOT NULL,
    status_code  INTEGER NOT NULL DEFAULT 0, -- 0 when no response arrived
    outcome      TEXT    NOT NULL
                 CHECK (outcome IN ('delivered', 'retry', 'permanent', 'refused', 'dead')),
    error        TEXT    NOT NULL DEFAULT '',
    duration_ms  INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX delivery_attempts_event ON delivery_attempts (event_id, id);
CREATE INDEX delivery_attempts_time ON delivery_attempts (attempted_at);

-- Health of each remote host deliveries go to. state: 'healthy',
-- 'failing' (consecutive failures, not yet for long), 'unavailable'
-- (failing for longer than the configured period: deliveries are parked
-- and one probe at a time tests the host). paused_at is an operator pause.
CREATE TABLE delivery_hosts (
    host                 TEXT    PRIMARY KEY,
    state                TEXT    NOT NULL DEFAULT 'healthy'
                         CHECK (state IN ('healthy', 'failing', 'unavailable')),
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    first_failure_at     INTEGER,
    last_failure_at      INTEGER,
    last_success_at      INTEGER,
    last_error           TEXT    NOT NULL DEFAULT '',
    unavailable_since    INTEGER,
    next_probe_at        INTEGER,
    probe_interval_ms    INTEGER NOT NULL DEFAULT 0,
    probe_event_id       TEXT,
    probe_deadline       INTEGER,
    paused_at            INTEGER,
    pause_reason         TEXT    NOT NULL DEFAULT '',
    updated_at           INTEGER NOT NULL
);

CREATE INDEX delivery_hosts_state ON delivery_hosts (state);
