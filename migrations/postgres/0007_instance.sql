-- PostgreSQL twin of ../0007_instance.sql: the instance actor's key. One row.
CREATE TABLE instance_actor (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    private_key_pem TEXT    NOT NULL,
    public_key_pem  TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL
);
