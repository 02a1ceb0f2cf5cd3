-- The instance actor's key: courier signs its fetches of remote actors and
-- keys as {base}/actor, which peers that require signed GETs (GoToSocial,
-- Mastodon in authorized-fetch mode) fetch back to verify. One row.
CREATE TABLE instance_actor (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    private_key_pem TEXT    NOT NULL,
    public_key_pem  TEXT    NOT NULL,
    created_at      INTEGER NOT NULL
);
