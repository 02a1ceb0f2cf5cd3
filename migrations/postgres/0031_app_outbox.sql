-- PostgreSQL twin of ../0031_app_outbox.sql: the application's outbox
-- view and its per-actor counters. The counter's upsert takes the row's
-- lock until commit, so concurrent writes by one actor wait on each other
-- and commit in seq order: a reader that sees seq n sees every seq below it.
CREATE TABLE app_outbox_counters (
    actor_id BIGINT PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    seq      BIGINT NOT NULL
);

CREATE TABLE app_outbox_items (
    actor_id     BIGINT NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    seq          BIGINT NOT NULL,
    activity_uri TEXT   NOT NULL,
    type         TEXT   NOT NULL,
    document     TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (actor_id, seq)
);
