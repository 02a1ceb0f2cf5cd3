-- The moves of local actors (a C2S Move to an account that lists the actor
-- in alsoKnownAs): the actor's document then names target as movedTo. The
-- row goes with the actor. moved_at: Unix ms.
CREATE TABLE actor_moves (
    actor_id    INTEGER PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    target      TEXT    NOT NULL,
    activity_id TEXT    NOT NULL,
    moved_at    INTEGER NOT NULL
);
