-- PostgreSQL twin of ../0027_app_inbox.sql: the application's inbox view
-- and its per-actor counters. The counter's upsert takes the row's lock
-- until commit, so concurrent imports for one actor wait on each other and
-- commit in seq order: a reader that sees seq n sees every seq below it.
CREATE TABLE app_inbox_counters (
    actor_id BIGINT PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    seq      BIGINT NOT NULL
);

CREATE TABLE app_inbox_items (
    actor_id     BIGINT NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    seq          BIGINT NOT NULL,
    activity_uri TEXT   NOT NULL,
    type         TEXT   NOT NULL,
    kind         TEXT   NOT NULL DEFAULT '',
    document     TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (actor_id, seq)
);

CREATE INDEX app_inbox_items_type ON app_inbox_items (actor_id, type, seq);
CREATE INDEX app_inbox_items_notifications ON app_inbox_items (actor_id, seq) WHERE kind <> '';
