-- PostgreSQL twin of ../0030_delivery_outcomes.sql: the settled outcome of
-- each delivery while webhook endpoints take delivery events.
CREATE TABLE delivery_outcomes (
    event_id    TEXT    PRIMARY KEY,
    activity_id TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    settled_at  BIGINT  NOT NULL
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
    updated_at  BIGINT  NOT NULL
);
