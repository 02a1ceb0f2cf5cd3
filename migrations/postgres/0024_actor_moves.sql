CREATE TABLE actor_moves (
    actor_id    BIGINT PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    target      TEXT   NOT NULL,
    activity_id TEXT   NOT NULL,
    moved_at    BIGINT NOT NULL
);
