-- Every local actor also holds an Ed25519 key (RFC 9421 "ed25519"
-- signatures, published as a FEP-521a Multikey in assertionMethod): its
-- 32-byte seed, from which the private and public keys are derived. New
-- actors get a seed from crypto/rand. Existing actors get one here, from
-- randomblob, which draws from SQLite's ChaCha20 generator seeded with the
-- operating system's randomness (the unix VFS reads /dev/urandom).
ALTER TABLE actors ADD COLUMN ed25519_seed BLOB CHECK (ed25519_seed IS NULL OR length(ed25519_seed) = 32);
UPDATE actors SET ed25519_seed = randomblob(32) WHERE ed25519_seed IS NULL;
