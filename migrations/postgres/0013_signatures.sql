-- PostgreSQL twin of ../0013_signatures.sql: every local actor's Ed25519
-- seed, and the signature schemes each remote host accepts.
--
-- Existing actors get a seed from gen_random_uuid() (built in since
-- PostgreSQL 13, drawn from the server's cryptographically strong random
-- source): two version-4 UUIDs are 32 bytes, of which 244 bits are random,
-- more than an Ed25519 key's 128-bit security level needs.
ALTER TABLE actors ADD COLUMN ed25519_seed BYTEA CHECK (ed25519_seed IS NULL OR length(ed25519_seed) = 32);
UPDATE actors SET ed25519_seed = uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
WHERE ed25519_seed IS NULL;

CREATE TABLE delivery_signature_schemes (
    host          TEXT   PRIMARY KEY,
    rfc9421       TEXT   CHECK (rfc9421 IN ('accepted', 'refused')),
    rfc9421_until BIGINT,
    ed25519       TEXT   CHECK (ed25519 IN ('accepted', 'refused')),
    ed25519_until BIGINT,
    learned_from  TEXT   NOT NULL DEFAULT '',
    updated_at    BIGINT NOT NULL
);
