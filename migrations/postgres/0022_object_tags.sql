-- PostgreSQL twin of ../0022_object_tags.sql: the hashtags of local objects.
CREATE TABLE object_tags (
    tag       TEXT   NOT NULL CHECK (length(tag) BETWEEN 1 AND 100),
    object_id BIGINT NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    PRIMARY KEY (tag, object_id)
);

CREATE INDEX object_tags_object ON object_tags (object_id);
