-- PostgreSQL twin of ../0039_threads.sql: a local object's conversation
-- (FEP-7888 context).
ALTER TABLE objects ADD COLUMN context_uri TEXT;

CREATE INDEX objects_context ON objects (context_uri);
