-- Every local actor also holds an Ed25519 key (RFC 9421 "ed25519"
-- signatures, published as a FEP-521a Multikey in assertionMethod): its
-- 32-byte seed, from which the private and public keys are derived. New
-- actors get a seed from crypto/rand. Existing actors get one here, from
-- randomblob, which draws from SQLite's ChaCha20 generator seeded with the
-- operating system's randomness (the unix VFS reads /dev/urandom).
ALTER TABLE actors ADD COLUMN ed25519_seed BLOB CHECK (ed25519_seed IS NULL OR length(ed25519_seed) = 32);
UPDATE actors SET ed25519_seed = randomblob(32) WHERE ed25519_seed IS NULL;

-- Which HTTP signature scheme each remote host accepts, as delivery learnt
-- it (package delivery owns the rows). rfc9421 / ed25519: 'accepted' or
-- 'refused' until the matching *_until time (Unix ms), NULL when unknown or
-- expired. learned_from: 'inbound' (the host sent a verified RFC 9421
-- signature) or 'delivery' (a POST with the scheme was answered, or refused
-- with 400/401 and then accepted with another).
CREATE TABLE delivery_signature_schemes (
    host          TEXT    PRIMARY KEY,
    rfc9421       TEXT    CHECK (rfc9421 IN ('accepted', 'refused')),
    rfc9421_until INTEGER,
    ed25519       TEXT    CHECK (ed25519 IN ('accepted', 'refused')),
    ed25519_until INTEGER,
    learned_from  TEXT    NOT NULL DEFAULT '',
    updated_at    INTEGER NOT NULL
);
