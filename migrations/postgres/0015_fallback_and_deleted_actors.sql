-- The PostgreSQL twin of 0015_fallback_and_deleted_actors.sql.
ALTER TABLE delivery_signature_schemes ADD COLUMN no_fallback_until BIGINT;
