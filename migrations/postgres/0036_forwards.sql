-- PostgreSQL twin of ../0036_forwards.sql: inbound activities forwarded
-- to local actors' followers, their bytes exactly as received.
CREATE TABLE forwards (
    activity_id TEXT   NOT NULL PRIMARY KEY,
    document    TEXT   NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE INDEX forwards_created ON forwards (created_at);
