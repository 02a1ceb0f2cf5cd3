-- The PostgreSQL twin of 0015_fallback_and_deleted_actors.sql.
ALTER TABLE delivery_signature_schemes ADD COLUMN no_fallback_until BIGINT;

CREATE TABLE deleted_actors (
    name       TEXT   PRIMARY KEY,
    deleted_at BIGINT NOT NULL
);
INSERT INTO deleted_actors (name, deleted_at)
SELECT name, deleted_at FROM actors WHERE deleted_at IS NOT NULL;
