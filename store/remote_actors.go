package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/courier-ap/courier/activitypub"
)

// The store is the Resolver's persistent actor cache.
var _ activitypub.ActorStore = (*Store)(nil)

// GetRemoteActor returns the cached remote actor id and when it was
// fetched; a nil actor and nil error when it is not cached. A gone actor is
// returned too: GoneAt tells callers (RemoteActorGone) not to deliver to it.
func (s *Store) GetRemoteActor(ctx context.Context, id string) (*activitypub.Actor, time.Time, error) {
	var doc string
	var fetched int64
	err := s.db.Read.QueryRowContext(ctx, `SELECT document, fetched_at FROM remote_actors WHERE uri = ?`, id).Scan(&doc, &fetched)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, wrap("get remote actor", err)
	}
	a, err := activitypub.ParseActor([]byte(doc))
	if err != nil {
		// A row that no longer parses is as good as absent: refetch.
		return nil, time.Time{}, nil
	}
	return a, fromMS(fetched), nil
}

// MaxRemoteActorDocument bounds the document of a cached remote actor: a
// larger one is not kept (the actor is used as fetched and fetched again
// when needed). Actors of the fediverse's servers weigh a few kilobytes.
const MaxRemoteActorDocument = 256 << 10

// PutRemoteActor caches a, keyed by a.ID, with its document exactly as
// fetched. A fresh fetch clears a gone mark. A document over
// MaxRemoteActorDocument is refused (EINVALID).
func (s *Store) PutRemoteActor(ctx context.Context, a *activitypub.Actor, raw []byte, fetchedAt time.Time) error {
	if a == nil || a.ID == "" || a.Inbox == "" {
		return Errorf(EINVALID, "remote actor needs an id and an inbox")
	}
	if err := checkRemoteText(raw, "id", a.ID, "inbox", a.Inbox, "sharedInbox", a.SharedInbox,
		"publicKey.id", a.PublicKey.ID); err != nil {
		return err
	}
	if len(raw) > MaxRemoteActorDocument {
		return Errorf(EINVALID, "remote actor %q document is %d bytes, over the %d kept", a.ID, len(raw), MaxRemoteActorDocument)
	}
	if len(raw) == 0 {
		b, err := json.Marshal(a)
		if err != nil {
			return wrap("put remote actor", err)
		}
		raw = b
	}
	if !json.Valid(raw) {
		return Errorf(EINVALID, "remote actor %q document is not JSON", a.ID)
	}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO remote_actors
			(uri, inbox, shared_inbox, key_id, public_key_pem, document, fetched_at, gone_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, NULL)
			ON CONFLICT (uri) DO UPDATE SET inbox = excluded.inbox, shared_inbox = excluded.shared_inbox,
				key_id = excluded.key_id, public_key_pem = excluded.public_key_pem, document = excluded.document,
				fetched_at = excluded.fetched_at, gone_at = NULL`,
			a.ID, a.Inbox, nullString(a.SharedInbox), nullString(a.PublicKey.ID), nullString(a.PublicKey.PublicKeyPem),
			string(raw), ms(fetchedAt))
		return err
	})
	return wrap("put remote actor", err)
}

// RemoteActorGone reports whether the remote actor id is marked gone (it
// answered 410 or was deleted) and since when.
func (s *Store) RemoteActorGone(ctx context.Context, id string) (bool, time.Time, error) {
	var gone sql.NullInt64
	err := s.db.Read.QueryRowContext(ctx, `SELECT gone_at FROM remote_actors WHERE uri = ?`, id).Scan(&gone)
	if errors.Is(err, sql.ErrNoRows) {
		return false, time.Time{}, nil
	}
	if err != nil {
		return false, time.Time{}, wrap("remote actor gone", err)
	}
	return gone.Valid, fromNullMS(gone), nil
}

// MarkRemoteActorGoneTx marks the remote actor id gone in tx.
func (s *Store) MarkRemoteActorGoneTx(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `UPDATE remote_actors SET gone_at = ? WHERE uri = ? AND gone_at IS NULL`, ms(s.clock()), id)
	return wrap("mark remote actor gone", err)
}

// SweepRemoteActors deletes the cached remote actors fetched before cutoff
// (and marked gone before it, if at all), at most batch rows a
// transaction, and returns how many it deleted. The cache refreshes what
// is in use every day or so; a row older than cutoff is an actor no one
// here has needed since, refetched should it be needed again.
func (s *Store) SweepRemoteActors(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	return s.sweepBatches(ctx, "sweep remote actors", batch, func(tx *sql.Tx) (int64, error) {
		return deletedRows(tx.ExecContext(ctx, `DELETE FROM remote_actors WHERE uri IN (
			SELECT uri FROM remote_actors WHERE fetched_at < ? AND (gone_at IS NULL OR gone_at < ?) LIMIT ?)`,
			ms(cutoff), ms(cutoff), batch))
	})
}

// checkRemoteText refuses (EINVALID) a remote document that is not valid
// UTF-8 or holds a NUL character, and URL fields (given as name, value
// pairs) with a control character: SQLite would keep them, PostgreSQL
// refuses them, so a store copy would stop on them.
func checkRemoteText(doc []byte, fields ...string) error {
	if err := activitypub.CheckText(doc); err != nil {
		return Errorf(EINVALID, "%v", err)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if err := activitypub.CheckURL(fields[i], fields[i+1]); err != nil {
			return Errorf(EINVALID, "%v", err)
		}
	}
	return nil
}

// checkRemoteObjectText is checkRemoteText for a remote object: its
// document, id, author, inReplyTo and audience.
func checkRemoteObjectText(o RemoteObject) error {
	fields := []string{"id", o.URI, "attributedTo", o.AttributedTo, "inReplyTo", o.InReplyTo}
	for _, v := range append(append([]string(nil), o.To...), o.CC...) {
		fields = append(fields, "audience", v)
	}
	if err := checkRemoteText(o.Document, fields...); err != nil {
		return err
	}
	for _, v := range []string{o.Content, o.Summary, o.Type} {
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return Errorf(EINVALID, "remote object %q: text not valid UTF-8 or with a NUL character", o.URI)
		}
	}
	return nil
}
