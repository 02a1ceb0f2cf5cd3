-- Relays the instance actor subscribes to (FEP-ae0c). url is what the
-- operator gave: a relay inbox (style 'mastodon': a Follow of as:Public is
-- sent there, and public activities are delivered there too) or a relay
-- actor (style 'litepub': the instance actor follows it, accepts its follow
-- back, and imports its Announces by fetching the objects). actor_uri is
-- the relay actor, learnt from its Accept for the Mastodon style.
CREATE TABLE relays (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    url                TEXT    NOT NULL UNIQUE,
    style              TEXT    NOT NULL CHECK (style IN ('mastodon', 'litepub')),
    actor_uri          TEXT,
    state              TEXT    NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected')),
    follow_activity_id TEXT    NOT NULL UNIQUE,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
);

CREATE INDEX relays_actor ON relays (actor_uri);
