-- Tombstones of remote deletions (package store, for inbox): one row per
-- remote object a Delete named, stored or not, so that a Create or Update
-- of it arriving later (peers deliver out of order too) is acknowledged
-- and not stored. deleted_at: Unix ms, when the Delete was imported; rows
-- older than the inbox's tombstone retention (30 days) are swept, and the
-- oldest go first when more than its bound are held.
CREATE TABLE remote_tombstones (
    object_uri TEXT    PRIMARY KEY,
    actor_uri  TEXT    NOT NULL,
    deleted_at INTEGER NOT NULL
);
CREATE INDEX remote_tombstones_deleted ON remote_tombstones (deleted_at);

-- The number of remote_tombstones rows, kept on write so that the bound
-- costs one row, not a count; and how many late Creates and Updates a
-- tombstone turned away (the import outcome "tombstoned").
CREATE TABLE remote_tombstone_counts (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    held    INTEGER NOT NULL,
    refused INTEGER NOT NULL
);
INSERT INTO remote_tombstone_counts (id, held, refused) VALUES (1, 0, 0);
