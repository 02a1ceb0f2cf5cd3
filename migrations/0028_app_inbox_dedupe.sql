-- An activity lands in an actor's inbox view once (package app): the
-- recorder looks it up here before it takes a seq, so that a handler run
-- again after its transaction committed (a local activity's fan-out whose
-- ledger mark a crash lost) records nothing twice.
CREATE UNIQUE INDEX app_inbox_items_activity ON app_inbox_items (actor_id, activity_uri);
