-- The JSON-LD @context a local object was written with, beyond
-- ActivityStreams and courier's own terms: the client's context entries as
-- a JSON array ('' when it sent none). The object's document is stored
-- without @context (it is embedded in activities); the context is put back
-- on the activity that carries it and on the object served alone, so a
-- client's extension terms survive.
ALTER TABLE objects ADD COLUMN context_json TEXT NOT NULL DEFAULT '';
