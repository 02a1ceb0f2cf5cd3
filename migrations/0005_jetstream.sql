-- JetStream messages the events consumer gave up on: one row per captured
-- max-deliveries or terminated advisory, so the admin API can list exhausted
-- events and ask the worker to replay one. Written by outbox/natsbus.
-- Times are Unix milliseconds written by Go.

CREATE TABLE jetstream_exhausted (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    advisory_id         TEXT    NOT NULL UNIQUE,  -- the advisory's own id: a redelivered advisory is recorded once
    reason              TEXT    NOT NULL CHECK (reason IN ('max_deliveries', 'terminated')),
    stream              TEXT    NOT NULL,
    consumer            TEXT    NOT NULL,
    stream_seq          INTEGER NOT NULL,
    deliveries          INTEGER NOT NULL,
    event_id            TEXT,                     -- read back from the events stream; NULL when gone
    event_type          TEXT,
    detail              TEXT,                     -- the terminate reason, or why the event could not be read
    advised_at          INTEGER NOT NULL,         -- the advisory's timestamp
    recorded_at         INTEGER NOT NULL,
    replay_requested_at INTEGER,                  -- set by Replay; the worker republishes
    replays             INTEGER NOT NULL DEFAULT 0,
    replayed_at         INTEGER,
    replay_error        TEXT
);

CREATE INDEX jetstream_exhausted_event ON jetstream_exhausted (event_id);
CREATE INDEX jetstream_exhausted_replay ON jetstream_exhausted (replay_requested_at);
