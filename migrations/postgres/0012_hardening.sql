-- PostgreSQL twin of ../0012_hardening.sql: what arrives is stored once
-- (an imported activity's document is cleared, a remote object's text lives
-- in its document alone), and a deleted local actor's row and key outlive
-- the deliveries of its Delete.
UPDATE inbox_activities SET document = '' WHERE imported_at IS NOT NULL;
UPDATE objects SET content = '', summary = '' WHERE actor_id IS NULL AND document != '';

ALTER TABLE actors ADD COLUMN deleted_at BIGINT;
