-- Webhook endpoints (package app/webhook): the URLs the operator added
-- (`courier admin webhooks add`) that receive the events of one local
-- actor (actor_id) or of every local actor (NULL), optionally only the
-- event types listed in events (comma-separated; '' is every type).
-- Each event is an outbox row of type webhook.post whose target is the
-- endpoint's host key, delivered like a delivery to a remote host.
CREATE TABLE webhook_endpoints (
    id         INTEGER PRIMARY KEY,
    url        TEXT    NOT NULL,
    actor_id   INTEGER REFERENCES actors (id) ON DELETE CASCADE,
    events     TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);
CREATE INDEX webhook_endpoints_actor ON webhook_endpoints (actor_id);

-- The signing secrets of each endpoint (whsec_ + base64 of the key): kept
-- because every POST is signed with them, never shown after `add` or
-- `rotate` printed them. A rotated-out secret keeps signing beside the
-- new one until expires_at (Unix ms); the current one has none.
CREATE TABLE webhook_secrets (
    id          INTEGER PRIMARY KEY,
    endpoint_id INTEGER NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    secret      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER
);
CREATE INDEX webhook_secrets_endpoint ON webhook_secrets (endpoint_id);
