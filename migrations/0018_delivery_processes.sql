-- The processes that deliver (a server running the db bus's worker, or a
-- worker), one row each, kept by the process itself (package delivery):
-- it writes seen_at (Unix ms) every 10 s and deletes its row when it stops.
-- A healthy host's per-host concurrency is shared among the processes
-- seen in the last 30 s, so that two workers on one database send a host
-- no more POSTs at once than one would.
CREATE TABLE delivery_processes (
    id         TEXT    PRIMARY KEY,
    hostname   TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL
);
CREATE INDEX delivery_processes_seen ON delivery_processes (seen_at);
