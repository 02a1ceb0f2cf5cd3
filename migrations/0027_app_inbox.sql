-- The application's inbox view (package app): every imported activity that
-- concerns a local actor, once per actor, in the import's own transaction.
-- seq is the actor's durable sequence: app_inbox_counters holds its last
-- value, taken and raised by an upsert in the recording transaction, so
-- that two imports for one actor never share a seq and commit in seq order.
-- The inbox collection pages on (actor_id, seq), the stream resumes from a
-- Last-Event-ID there; kind is why the item is a notification ('' for what
-- only fills the actor's timeline).
CREATE TABLE app_inbox_counters (
    actor_id INTEGER PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    seq      INTEGER NOT NULL
);

CREATE TABLE app_inbox_items (
    actor_id     INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    activity_uri TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    kind         TEXT    NOT NULL DEFAULT '',
    document     TEXT    NOT NULL, -- the activity as received, its object embedded as stored
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (actor_id, seq)
);

-- ?type= filters page on this index; ?notifications=true on the next.
CREATE INDEX app_inbox_items_type ON app_inbox_items (actor_id, type, seq);
CREATE INDEX app_inbox_items_notifications ON app_inbox_items (actor_id, seq) WHERE kind <> '';
