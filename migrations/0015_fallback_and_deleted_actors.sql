-- A host that refused every signature scheme of one delivery attempt with
-- 400 or 401 (its refusals had nothing to do with signatures) gets one POST
-- per attempt, without falling back, until no_fallback_until (Unix ms);
-- NULL when falling back is worth it.
ALTER TABLE delivery_signature_schemes ADD COLUMN no_fallback_until INTEGER;
