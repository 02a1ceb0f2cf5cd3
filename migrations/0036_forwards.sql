-- Inbound activities forwarded to local actors' followers (ActivityPub
-- 7.1.2 inbox forwarding): the bytes exactly as received, which every
-- forwarded delivery (a delivery.post event of its own) sends unchanged.
-- Rows go after the inbox's retention, as recorded inbound activities do.
CREATE TABLE forwards (
    activity_id TEXT    NOT NULL PRIMARY KEY,
    document    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE INDEX forwards_created ON forwards (created_at);
