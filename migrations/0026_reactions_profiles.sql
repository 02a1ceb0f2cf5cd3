-- Emoji reactions, actor profiles and pinned posts (package store).
--
-- emoji_reactions: an emoji reaction of a remote actor on a local object:
-- an EmojiReact (honk, Pleroma, Akkoma) or Misskey's Like with content or
-- _misskey_reaction. emoji is the reaction's content (a Unicode emoji or a
-- custom one's :shortcode:), emoji_icon the custom emoji's image URL ('' for
-- a Unicode emoji). One per (actor, object, emoji): Pleroma allows several
-- emoji by one actor on one object, Misskey one.
CREATE TABLE emoji_reactions (
    activity_uri TEXT    PRIMARY KEY,
    actor_uri    TEXT    NOT NULL,
    object_uri   TEXT    NOT NULL,
    emoji        TEXT    NOT NULL CHECK (length(emoji) BETWEEN 1 AND 256),
    emoji_icon   TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL
);

CREATE UNIQUE INDEX emoji_reactions_once ON emoji_reactions (actor_uri, object_uri, emoji);
CREATE INDEX emoji_reactions_object ON emoji_reactions (object_uri, emoji);

-- The profile fields beyond name and summary a client sets by an Update of
-- the actor (icon, image, attachment, discoverable, indexable,
-- alsoKnownAs), as one JSON object (store.Profile).
ALTER TABLE actors ADD COLUMN profile_json TEXT NOT NULL DEFAULT '{}';

-- An actor's pinned objects, served in its featured collection, newest
-- first.
CREATE TABLE featured (
    actor_id   INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    object_uri TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (actor_id, object_uri)
);

CREATE INDEX featured_object ON featured (object_uri);
