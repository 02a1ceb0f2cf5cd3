-- PostgreSQL twin of ../0004_inbox.sql: activities received at the inboxes,
-- owned by package inbox.

CREATE TABLE inbox_activities (
    activity_id TEXT   PRIMARY KEY,
    type        TEXT   NOT NULL,
    actor       TEXT   NOT NULL,
    object_id   TEXT,
    inbox       TEXT   NOT NULL DEFAULT '',
    key_id      TEXT   NOT NULL,
    event_id    TEXT   NOT NULL,
    document    TEXT   NOT NULL,
    received_at BIGINT NOT NULL,
    imported_at BIGINT,
    outcome     TEXT
);

CREATE INDEX inbox_activities_actor ON inbox_activities (actor);
CREATE INDEX inbox_activities_received ON inbox_activities (received_at);
CREATE INDEX inbox_activities_pending ON inbox_activities (imported_at);
