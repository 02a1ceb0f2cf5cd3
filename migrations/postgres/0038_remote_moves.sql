-- The last honoured Move of each remote account (package store,
-- MoveFollowsTx): another Move of the same account within the cooldown
-- (store.MoveCooldown, 7 days) is not honoured, so that an account moving
-- back and forth does not make every follower here unfollow and follow
-- again each time. moved_at: Unix ms.
CREATE TABLE remote_moves (
    actor_uri TEXT    PRIMARY KEY,
    target    TEXT    NOT NULL,
    moved_at  BIGINT  NOT NULL
);
