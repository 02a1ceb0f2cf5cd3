-- PostgreSQL twin of ../0028_app_inbox_dedupe.sql: an activity lands in an
-- actor's inbox view once. The recorder's lookup runs after it holds the
-- actor's counter lock, so two transactions recording one activity for one
-- actor see each other's item.
CREATE UNIQUE INDEX app_inbox_items_activity ON app_inbox_items (actor_id, activity_uri);
