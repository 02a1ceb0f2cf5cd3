-- The table PostgreSQL appends the counts of new outbox rows to, instead of
-- adding them in place (see postgres/0020_outbox_count_deltas.sql), which
-- outbox.Queue.Stats sums with event_queue_counts and the sweeper folds into
-- it. SQLite's one writer keeps counting in place (the row triggers of
-- migration 0014): here the table stays empty unless a store copied from
-- PostgreSQL brought deltas along, and those are folded like PostgreSQL's.
CREATE TABLE event_queue_count_deltas (
    id     INTEGER PRIMARY KEY,
    status TEXT    NOT NULL,
    type   TEXT    NOT NULL,
    n      INTEGER NOT NULL
);
