-- PostgreSQL twin of ../0023_poll_votes.sql: votes on local Questions.
CREATE TABLE poll_votes (
    object_id    BIGINT NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    voter_uri    TEXT   NOT NULL,
    option_name  TEXT   NOT NULL,
    activity_uri TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (object_id, voter_uri, option_name)
);
