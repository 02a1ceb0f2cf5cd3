-- Activities received at the inboxes, owned by package inbox. Each verified
-- activity is recorded once under its ActivityPub id, in the transaction that
-- enqueues its inbox.received event; a repeated id is a duplicate. The import
-- handler sets imported_at and outcome in the transaction of its effects, so
-- an activity is imported once however often its event runs.
-- Times are Unix milliseconds written by Go.

CREATE TABLE inbox_activities (
    activity_id TEXT    PRIMARY KEY,          -- the activity's ActivityPub id
    type        TEXT    NOT NULL,
    actor       TEXT    NOT NULL,             -- the verified actor (the signing key's owner)
    object_id   TEXT,
    inbox       TEXT    NOT NULL DEFAULT '',  -- local actor name of a personal inbox; '' for the shared inbox
    key_id      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,             -- the inbox.received event (derived from activity_id)
    document    TEXT    NOT NULL,             -- the activity exactly as received
    received_at INTEGER NOT NULL,
    imported_at INTEGER,                      -- NULL until imported
    outcome     TEXT                          -- what the import did (imported, ignored, refused: ...)
);

CREATE INDEX inbox_activities_actor ON inbox_activities (actor);
CREATE INDEX inbox_activities_received ON inbox_activities (received_at);
CREATE INDEX inbox_activities_pending ON inbox_activities (imported_at);
