CREATE TABLE remote_tombstones (
    object_uri TEXT   PRIMARY KEY,
    actor_uri  TEXT   NOT NULL,
    deleted_at BIGINT NOT NULL
);
CREATE INDEX remote_tombstones_deleted ON remote_tombstones (deleted_at);

CREATE TABLE remote_tombstone_counts (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    held    BIGINT  NOT NULL,
    refused BIGINT  NOT NULL
);
INSERT INTO remote_tombstone_counts (id, held, refused) VALUES (1, 0, 0);
