-- PostgreSQL twin of ../0009_inbox_indexes.sql: fewer indexes on
-- inbox_activities, a partial index of imported rows for the sweep.

DROP INDEX IF EXISTS inbox_activities_actor;
DROP INDEX IF EXISTS inbox_activities_received;
DROP INDEX IF EXISTS inbox_activities_pending;

CREATE INDEX inbox_activities_imported ON inbox_activities (imported_at) WHERE imported_at IS NOT NULL;
