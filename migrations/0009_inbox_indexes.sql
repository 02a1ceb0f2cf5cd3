-- Fewer indexes on inbox_activities: every accepted activity is one insert
-- here, on the path that answers the sender, and each index is one more
-- B-tree write (and more pages to the WAL) per insert.
--
-- Nothing reads the table by actor or by received_at (imports and duplicate
-- checks go by activity_id, the primary key). The retention sweep reads
-- imported rows by imported_at; rows are inserted with imported_at NULL, so
-- a partial index of the imported rows costs the accept path nothing and
-- serves the sweep as before (its write moves to the import, which sets
-- imported_at).

DROP INDEX IF EXISTS inbox_activities_actor;
DROP INDEX IF EXISTS inbox_activities_received;
DROP INDEX IF EXISTS inbox_activities_pending;

CREATE INDEX inbox_activities_imported ON inbox_activities (imported_at) WHERE imported_at IS NOT NULL;
