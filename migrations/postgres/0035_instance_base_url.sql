-- PostgreSQL twin of ../0035_instance_base_url.sql: the base URL this
-- database is served under, recorded at each start (store.RecordBaseURL).
CREATE TABLE instance_base_url (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    base_url   TEXT    NOT NULL,
    updated_at BIGINT  NOT NULL
);
