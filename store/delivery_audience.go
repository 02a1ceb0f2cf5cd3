package store

import (
	"context"
	"database/sql"
	"encoding/json"
)

// DeliveryFollowers returns the accepted followers of the local actor
// actorID an activity may be delivered to: followers the actor blocks and
// followers on domains the operator blocked are left out. Unlike
// FollowerInboxes it returns every follower with both inboxes, so the
// delivery fan-out can group them by host and know who is behind a
// personal inbox.
func (s *Store) DeliveryFollowers(ctx context.Context, actorID int64) ([]Follower, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT f.follower_uri, f.inbox, COALESCE(f.shared_inbox, '')
		FROM followers f
		WHERE f.actor_id = ? AND f.state = 'accepted'
		AND NOT EXISTS (SELECT 1 FROM blocks b WHERE b.actor_id = f.actor_id
			AND b.remote_uri = f.follower_uri AND b.direction = 'outgoing')
		ORDER BY f.follower_uri`, actorID)
	if err != nil {
		return nil, wrap("delivery followers", err)
	}
	defer rows.Close()
	var all []Follower
	for rows.Next() {
		f := Follower{ActorID: actorID, State: StateAccepted}
		if err := rows.Scan(&f.URI, &f.Inbox, &f.SharedInbox); err != nil {
			return nil, wrap("delivery followers", err)
		}
		all = append(all, f)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("delivery followers", err)
	}
	blocked, err := s.domainBlockSet(ctx)
	if err != nil {
		return nil, err
	}
	if len(blocked) == 0 {
		return all, nil
	}
	out := all[:0]
	for _, f := range all {
		if !domainBlocked(blocked, hostOf(f.URI)) && !domainBlocked(blocked, hostOf(f.Inbox)) {
			out = append(out, f)
		}
	}
	return out, nil
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
