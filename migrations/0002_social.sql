-- The social tables owned by package store: local actors, objects, the
-- activities courier built, follow relationships, blocks, reactions and the
-- remote actor cache. Times are Unix milliseconds written by Go.

-- Local actors. The bearer token of an actor's outbox is never stored, only
-- its SHA-256 (hex). Names are validated in Go ([a-z0-9_]{1,30}).
CREATE TABLE actors (
    id                          INTEGER PRIMARY KEY AUTOINCREMENT,
    name                        TEXT    NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 30),
    display_name                TEXT    NOT NULL DEFAULT '',
    summary                     TEXT    NOT NULL DEFAULT '',
    manually_approves_followers INTEGER NOT NULL DEFAULT 0 CHECK (manually_approves_followers IN (0, 1)),
    private_key_pem             TEXT    NOT NULL,
    public_key_pem              TEXT    NOT NULL,
    token_hash                  TEXT    NOT NULL,
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL
);

-- Notes, local and remote, by ActivityPub id. local_id is the path segment of
-- /objects/{id} for local objects (NULL for remote ones). A deleted object
-- keeps its row as a tombstone: deleted_at set, former_type kept, content
-- and document cleared.
CREATE TABLE objects (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    uri           TEXT    NOT NULL UNIQUE,
    local_id      TEXT    UNIQUE,
    type          TEXT    NOT NULL,
    attributed_to TEXT    NOT NULL,
    actor_id      INTEGER REFERENCES actors (id) ON DELETE CASCADE,
    content       TEXT    NOT NULL DEFAULT '',
    summary       TEXT    NOT NULL DEFAULT '',
    in_reply_to   TEXT,
    to_json       TEXT    NOT NULL DEFAULT '[]',
    cc_json       TEXT    NOT NULL DEFAULT '[]',
    visibility    TEXT    NOT NULL CHECK (visibility IN ('public', 'unlisted', 'followers', 'direct')),
    published_at  INTEGER NOT NULL,
    updated_at    INTEGER,                   -- the object's own "updated"; NULL when never edited
    deleted_at    INTEGER,
    former_type   TEXT,
    document      TEXT    NOT NULL,          -- JSON of the object as served or received
    created_at    INTEGER NOT NULL,          -- row bookkeeping
    modified_at   INTEGER NOT NULL
);

CREATE INDEX objects_attributed_to ON objects (attributed_to);
CREATE INDEX objects_actor ON objects (actor_id, published_at);
CREATE INDEX objects_in_reply_to ON objects (in_reply_to);

-- Activities courier built for its local actors: the exact bytes sent, so
-- /activities/{id} and the outbox collection serve what peers received.
CREATE TABLE activities (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    uri          TEXT    NOT NULL UNIQUE,
    actor_uri    TEXT    NOT NULL,
    actor_id     INTEGER REFERENCES actors (id) ON DELETE CASCADE,
    type         TEXT    NOT NULL,
    object_uri   TEXT,
    document     TEXT    NOT NULL,
    published_at INTEGER NOT NULL,
    public       INTEGER NOT NULL DEFAULT 0 CHECK (public IN (0, 1)),
    withdrawn_at INTEGER,                    -- undone, or its object deleted: left out of the outbox
    event_id     TEXT,
    created_at   INTEGER NOT NULL
);

CREATE INDEX activities_outbox ON activities (actor_id, public, withdrawn_at, id);
CREATE INDEX activities_object ON activities (object_uri, type);
CREATE INDEX activities_event ON activities (event_id);

-- Remote actors following local actors. state is 'pending' while a
-- manually-approving actor has not answered.
CREATE TABLE followers (
    actor_id           INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    follower_uri       TEXT    NOT NULL,
    inbox              TEXT    NOT NULL,
    shared_inbox       TEXT,
    follow_activity_id TEXT,
    state              TEXT    NOT NULL CHECK (state IN ('pending', 'accepted')),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (actor_id, follower_uri)
);

CREATE INDEX followers_follower ON followers (follower_uri);
CREATE INDEX followers_state ON followers (actor_id, state, created_at);

-- Remote actors local actors follow (or asked to follow).
CREATE TABLE following (
    actor_id           INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    target_uri         TEXT    NOT NULL,
    follow_activity_id TEXT    NOT NULL UNIQUE,
    state              TEXT    NOT NULL CHECK (state IN ('pending', 'accepted')),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (actor_id, target_uri)
);

CREATE INDEX following_target ON following (target_uri);

-- Blocks between a local actor and a remote actor. direction 'outgoing': the
-- local actor blocks the remote one; 'incoming': the remote actor blocked us.
CREATE TABLE blocks (
    actor_id    INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    remote_uri  TEXT    NOT NULL,
    direction   TEXT    NOT NULL CHECK (direction IN ('outgoing', 'incoming')),
    activity_id TEXT,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (actor_id, remote_uri, direction)
);

CREATE INDEX blocks_remote ON blocks (remote_uri);

-- Whole remote domains the operator refuses to federate with.
CREATE TABLE domain_blocks (
    domain     TEXT    PRIMARY KEY,
    reason     TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);

-- Likes and Announces of objects (local ones by remote actors, so a Note's
-- likes/shares collections can count them; remote ones by local actors, so
-- an Undo finds its activity). One per (type, actor, object).
CREATE TABLE reactions (
    activity_uri TEXT    PRIMARY KEY,
    type         TEXT    NOT NULL CHECK (type IN ('Like', 'Announce')),
    actor_uri    TEXT    NOT NULL,
    object_uri   TEXT    NOT NULL,
    created_at   INTEGER NOT NULL
);

CREATE UNIQUE INDEX reactions_once ON reactions (type, actor_uri, object_uri);
CREATE INDEX reactions_object ON reactions (object_uri, type);

-- Remote actors as last fetched. gone_at is set when the actor answered 410
-- or was deleted.
CREATE TABLE remote_actors (
    uri            TEXT    PRIMARY KEY,
    inbox          TEXT    NOT NULL,
    shared_inbox   TEXT,
    key_id         TEXT,
    public_key_pem TEXT,
    document       TEXT    NOT NULL,
    fetched_at     INTEGER NOT NULL,
    gone_at        INTEGER
);

CREATE INDEX remote_actors_key ON remote_actors (key_id);
