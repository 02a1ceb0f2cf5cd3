-- The hashtags of local objects, by normalised (lower-case) name, for
-- /tags/{name}: one row per object and tag, removed with the object's row
-- and replaced when the object is updated or deleted.
CREATE TABLE object_tags (
    tag       TEXT    NOT NULL CHECK (length(tag) BETWEEN 1 AND 100),
    object_id INTEGER NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    PRIMARY KEY (tag, object_id)
);

CREATE INDEX object_tags_object ON object_tags (object_id);
