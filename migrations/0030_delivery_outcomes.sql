-- The settled outcome of each delivery of a local activity, kept while a
-- webhook endpoint takes delivery events (package delivery, for
-- app/webhook): one row per delivery event, written in the transaction
-- that enqueues the delivery.dead event, or that finds the activity's last
-- delivery done and enqueues delivery.completed. The primary key makes a
-- settled outcome recorded twice (a handler run again after a crash)
-- enqueue nothing new. Rows go with the activity's delivery_targets rows
-- (delivery's retention).
CREATE TABLE delivery_outcomes (
    event_id    TEXT    PRIMARY KEY,
    activity_id TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    settled_at  INTEGER NOT NULL
);
CREATE INDEX delivery_outcomes_activity ON delivery_outcomes (activity_id, outcome);

-- Per activity: how many deliveries it has (its delivery_targets rows,
-- counted once, when its first outcome is recorded: the fan-out wrote them
-- all before any delivery ran) and how many were delivered, so that
-- finding the last one costs one row, not a count of them all.
CREATE TABLE delivery_outcome_counts (
    activity_id TEXT    PRIMARY KEY,
    total       INTEGER NOT NULL,
    delivered   INTEGER NOT NULL,
    updated_at  INTEGER  NOT NULL
);
