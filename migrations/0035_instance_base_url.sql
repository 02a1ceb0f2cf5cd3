-- The base URL this database is served under, recorded at each start of
-- courier's server and worker (store.RecordBaseURL): a command run without
-- --base-url (courier actor create) builds its ids from it rather than
-- from the default.
CREATE TABLE instance_base_url (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    base_url   TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);
