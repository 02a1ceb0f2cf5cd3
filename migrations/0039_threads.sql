-- Threads peers can complete: the conversation (FEP-7888 context) of a
-- local object, the root's {base}/contexts/{local_id}, inherited by
-- replies. NULL for remote objects and objects published before.
ALTER TABLE objects ADD COLUMN context_uri TEXT;

CREATE INDEX objects_context ON objects (context_uri);
