-- Quote consent (FEP-044f, as Mastodon 4.5 implements it).
--
-- actor_quote_policies holds a local actor's default canQuote (the JSON of
-- an interactionPolicy.canQuote object); no row is the default of
-- everyone, approved automatically. An object's own policy is in its
-- document.
CREATE TABLE actor_quote_policies (
    actor_id   INTEGER PRIMARY KEY REFERENCES actors (id) ON DELETE CASCADE,
    can_quote  TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
);

-- quote_stamps are the QuoteRequests local objects received and their
-- answers: pending (awaiting the author's approval), accepted (the
-- QuoteAuthorization served at /quotes/{local_id}) or revoked (410 there).
-- A rejected request leaves no row.
CREATE TABLE quote_stamps (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    local_id    TEXT    NOT NULL UNIQUE,
    object_id   INTEGER NOT NULL REFERENCES objects (id) ON DELETE CASCADE,
    actor_id    INTEGER NOT NULL REFERENCES actors (id) ON DELETE CASCADE,
    quote_uri   TEXT    NOT NULL,
    quoter_uri  TEXT    NOT NULL,
    request_uri TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'accepted', 'revoked')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (object_id, quote_uri)
);

CREATE INDEX quote_stamps_request ON quote_stamps (actor_id, request_uri);

-- quote_requests are the QuoteRequests local quotes sent: one per quote,
-- pending until the quoted author accepts (authorization_uri set, the
-- quote updated with quoteAuthorization) or rejects; revoked once the
-- author deletes the stamp (quoteAuthorization removed again).
CREATE TABLE quote_requests (
    object_id         INTEGER PRIMARY KEY REFERENCES objects (id) ON DELETE CASCADE,
    quoted_uri        TEXT    NOT NULL,
    quoted_author     TEXT    NOT NULL,
    request_uri       TEXT    NOT NULL UNIQUE,
    state             TEXT    NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected', 'revoked')),
    authorization_uri TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
