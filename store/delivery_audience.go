package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
)

// DeliveryInbox is one inbox the accepted followers of a local actor are
// reached at: a shared inbox, or a follower's own.
type DeliveryInbox struct {
	URL string
	// Shared reports that it is some follower's shared inbox.
	Shared bool
	// Recipient is the first follower behind it, in follower id order.
	Recipient string
	// Several reports that more than one follower is behind it.
	Several bool
}

// DeliveryInboxes returns the inboxes of the accepted followers of the local
// actor actorID an activity may be delivered to, in the order of their
// first followers' ids: each follower's shared inbox, or its own inbox when
// it has none. Followers the actor blocks and followers whose id or inbox
// is on a domain the operator blocked are left out.
//
// A big account's followers are read as a stream of rows folded into their
// inboxes, without a value per follower: an instance's shared inbox stands
// for thousands of them, and a fan-out reads them for every post.
func (s *Store) DeliveryInboxes(ctx context.Context, actorID int64) ([]DeliveryInbox, error) {
	blocked, err := s.domainBlockSet(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Read.QueryContext(ctx, `SELECT f.follower_uri, f.inbox, COALESCE(f.shared_inbox, '')
		FROM followers f
		WHERE f.actor_id = ? AND f.state = 'accepted'
		AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.actor_id = f.actor_id
			AND b.remote_uri = f.follower_uri AND b.direction = 'outgoing')
		ORDER BY f.follower_uri`, actorID)
	if err != nil {
		return nil, wrap("delivery inboxes", err)
	}
	defer rows.Close()
	var (
		out   []DeliveryInbox
		index = map[string]int{} // out's position of each inbox URL
		hosts = hostBlocks{set: blocked}
		// The row's bytes, valid until the next row: only an inbox seen
		// for the first time and its first follower become strings.
		uri, inbox, shared sql.RawBytes
	)
	for rows.Next() {
		if err := rows.Scan(&uri, &inbox, &shared); err != nil {
			return nil, wrap("delivery inboxes", err)
		}
		if hosts.blocked(uri) || hosts.blocked(inbox) {
			continue
		}
		box, isShared := shared, true
		if len(box) == 0 {
			box, isShared = inbox, false
		}
		if i, ok := index[string(box)]; ok {
			d := &out[i]
			d.Shared = d.Shared || isShared
			d.Several = d.Several || d.Recipient != string(uri)
			continue
		}
		u := string(box)
		index[u] = len(out)
		out = append(out, DeliveryInbox{URL: u, Shared: isShared, Recipient: string(uri)})
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("delivery inboxes", err)
	}
	return out, nil
}

// hostBlocks answers whether URLs are on a blocked domain (set), once per
// scheme and authority: the followers of one instance share them.
type hostBlocks struct {
	set  map[string]bool
	seen map[string]bool
}

func (h *hostBlocks) blocked(raw []byte) bool {
	if len(h.set) == 0 {
		return false
	}
	// The host of an absolute URL is in its scheme and authority (up to
	// the first /, ? or # after "://"); a URL without "://" is its own key.
	key := raw
	if i := bytes.Index(raw, []byte("://")); i >= 0 {
		if j := bytes.IndexAny(raw[i+3:], "/?#"); j >= 0 {
			key = raw[:i+3+j]
		}
	}
	if b, ok := h.seen[string(key)]; ok {
		return b
	}
	if h.seen == nil {
		h.seen = map[string]bool{}
	}
	k := string(key)
	b := domainBlocked(h.set, hostOf(k))
	h.seen[k] = b
	return b
}

// DeliveryBlocked reports whether the local actor actorID must not deliver
// to remoteURI: the actor blocks it, or its domain is blocked.
func (s *Store) DeliveryBlocked(ctx context.Context, actorID int64, remoteURI string) (bool, error) {
	if blocked, err := s.Blocks(ctx, actorID, remoteURI); err != nil || blocked {
		return blocked, err
	}
	return s.IsDomainBlocked(ctx, remoteURI)
}

// UpsertDeliveredActivityTx stores, in tx, the activity a delivery fan-out
// is about to send, keyed by its id: a new row, or the stored row's bytes
// replaced by doc (equal by construction, since activity ids are derived
// from the event that carries the bytes).
func (s *Store) UpsertDeliveredActivityTx(ctx context.Context, tx *sql.Tx, a *Activity) error {
	if a == nil || a.URI == "" || a.ActorURI == "" || a.Type == "" || !json.Valid(a.Document) {
		return Errorf(EINVALID, "an activity needs an id, an actor, a type and a JSON document")
	}
	published := a.Published
	if published.IsZero() {
		published = s.clock()
	}
	var actorID any
	if a.ActorID != 0 {
		actorID = a.ActorID
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO activities
		(uri, actor_uri, actor_id, type, object_uri, document, published_at, public, event_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (uri) DO UPDATE SET document = excluded.document
		WHERE activities.document <> excluded.document`,
		a.URI, a.ActorURI, actorID, a.Type, nullString(a.ObjectURI), string(a.Document), ms(published.UTC()),
		a.Public, nullString(a.EventID), ms(s.clock()))
	return wrap("upsert delivered activity", err)
}

// LockActivityActorTx returns, in tx, the local actor (row id and name) of
// the stored activity uri, and locks the activity's row (FOR NO KEY UPDATE
// on PostgreSQL), so that of two transactions settling its deliveries at
// once the second sees what the first wrote. An activity that is not a
// local actor's is ENOTFOUND.
func (s *Store) LockActivityActorTx(ctx context.Context, tx *sql.Tx, uri string) (actorID int64, name string, err error) {
	q := `SELECT a.actor_id, c.name FROM activities a JOIN actors c ON c.id = a.actor_id WHERE a.uri = ?`
	if s.db.Postgres() {
		q += ` FOR NO KEY UPDATE OF a`
	}
	err = tx.QueryRowContext(ctx, q, uri).Scan(&actorID, &name)
	if err != nil {
		return 0, "", wrap("lock activity", notFound(err, ENOTFOUND, "no local actor's activity %q", uri))
	}
	return actorID, name, nil
}
