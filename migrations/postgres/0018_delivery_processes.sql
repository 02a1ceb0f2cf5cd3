-- PostgreSQL twin of ../0018_delivery_processes.sql: the processes that
-- deliver, each keeping its own row.
CREATE TABLE delivery_processes (
    id         TEXT    PRIMARY KEY,
    hostname   TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    started_at BIGINT  NOT NULL,
    seen_at    BIGINT  NOT NULL
);
CREATE INDEX delivery_processes_seen ON delivery_processes (seen_at);
