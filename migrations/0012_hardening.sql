-- What arrives is stored once, and a deleted local actor's key outlives the
-- deliveries of its Delete.
--
-- An inbound activity's document is kept in inbox_activities only until it
-- is imported: the import writes what it keeps (a remote object's JSON in
-- objects.document) and clears the activity's copy, and the row stays, by
-- its id, to recognise redeliveries. A remote object's text lives in its
-- document alone: objects.content and objects.summary are '' for a remote
-- object whose document holds them (package store reads them from it);
-- local objects keep them, as they are what the local actor wrote.
UPDATE inbox_activities SET document = '' WHERE imported_at IS NOT NULL;
UPDATE objects SET content = '', summary = ''
WHERE actor_id IS NULL AND json_valid(document)
  AND json_extract(document, '$.content') IS content
  AND COALESCE(json_extract(document, '$.summary'), '') IS summary;

-- A deleted local actor: deleted_at set in the transaction that enqueues
-- its Delete. Its row, key included, stays while any delivery of that
-- Delete is queued (so each one is still signed) and is removed after.
ALTER TABLE actors ADD COLUMN deleted_at INTEGER;
