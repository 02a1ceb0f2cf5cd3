-- The application's outbox view (package app): every activity a local
-- actor writes, in the write's own transaction (store's activity hook),
-- with the actor's durable outbox sequence. app_outbox_counters holds its
-- last value, taken and raised by an upsert in the writing transaction, so
-- that two writes by one actor never share a seq and commit in seq order.
-- The outbox's event stream resumes from a Last-Event-ID on (actor_id, seq).
CREATE TABLE app_outbox_counters (
    actor_id INTEGER PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    seq      INTEGER NOT NULL
);

CREATE TABLE app_outbox_items (
    actor_id     INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    activity_uri TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    document     TEXT    NOT NULL, -- the activity as built and stored
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (actor_id, seq)
);
