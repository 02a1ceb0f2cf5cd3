-- PostgreSQL twin of ../0021_object_context.sql: the client's @context
-- entries of a local object.
ALTER TABLE objects ADD COLUMN context_json TEXT NOT NULL DEFAULT '';
