-- A host that refused every signature scheme of one delivery attempt with
-- 400 or 401 (its refusals had nothing to do with signatures) gets one POST
-- per attempt, without falling back, until no_fallback_until (Unix ms);
-- NULL when falling back is worth it.
ALTER TABLE delivery_signature_schemes ADD COLUMN no_fallback_until INTEGER;

-- The names of deleted local actors (courier actor delete), kept for good:
-- their URL answers 410 Gone with a Tombstone while the Delete is delivered
-- and after the actor's row is removed, and the name is never given to a
-- new actor, since peers cache the old actor and its key. deleted_at: Unix
-- ms.
CREATE TABLE deleted_actors (
    name       TEXT    PRIMARY KEY,
    deleted_at INTEGER NOT NULL
);
INSERT INTO deleted_actors (name, deleted_at)
SELECT name, deleted_at FROM actors WHERE deleted_at IS NOT NULL;
