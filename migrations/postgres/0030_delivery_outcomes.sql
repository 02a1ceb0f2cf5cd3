-- PostgreSQL twin of ../0030_delivery_outcomes.sql: the settled outcome of
-- each delivery while webhook endpoints take delivery events.
CREATE TABLE delivery_outcomes (
    event_id    TEXT    PRIMARY KEY,
    activity_id TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    settled_at  BIGINT  NOT NULL
);
CREATE INDEX delivery_outcomes_activity ON delivery_outcomes (activity_id, outcome);
