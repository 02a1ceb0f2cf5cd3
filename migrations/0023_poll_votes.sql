-- Votes on local Questions (polls), one row per voter and option: a remote
-- actor's Create of a Note whose name is the option and whose inReplyTo is
-- the Question. A oneOf poll keeps one option per voter (the primary key
-- on (object_id, voter_uri, option_name) with the import's check); anyOf
-- allows one row per option. The counts are served as each option's
-- replies.totalItems and the poll's votersCount.
CREATE TABLE poll_votes (
    object_id    INTEGER NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    voter_uri    TEXT    NOT NULL,
    option_name  TEXT    NOT NULL,
    activity_uri TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (object_id, voter_uri, option_name)
);
