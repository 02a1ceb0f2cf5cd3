package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// Relay styles (FEP-ae0c).
const (
	// RelayMastodon: the relay's URL is its inbox; the instance actor sends
	// it a Follow of as:Public, and public activities are delivered to it.
	RelayMastodon = "mastodon"
	// RelayLitePub: the relay's URL is its actor; the instance actor follows
	// it and accepts its follow back; it sends Announces of object ids.
	RelayLitePub = "litepub"
)

// EventRelaySend is the outbox event type of one activity POSTed to a
// relay; its payload is a RelaySend.
const EventRelaySend = "relay.send"

// RelaySend is the payload of an EventRelaySend event.
type RelaySend struct {
	// Actor is the local actor (or the instance actor) whose key signs.
	Actor string `json:"actor"`
	// Inbox is the inbox POSTed to; empty: the inbox of To, resolved.
	Inbox string `json:"inbox,omitempty"`
	// To is the relay actor whose inbox receives it when Inbox is empty.
	To string `json:"to,omitempty"`
	// Activity is the activity, exactly as POSTed.
	Activity json.RawMessage `json:"activity"`
}

// Relay is a relay subscription.
type Relay struct {
	ID               int64
	URL              string
	Style            string
	ActorURI         string // the relay actor; for the Mastodon style known once it answers
	State            string // StatePending, StateAccepted or StateRejected
	FollowActivityID string
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// RelayStyle tells the style of a relay from its URL: an inbox URL (path
// ending in /inbox) is the Mastodon style, anything else is a relay actor
// (LitePub).
func RelayStyle(rawURL string) string {
	if strings.HasSuffix(strings.TrimSuffix(rawURL, "/"), "/inbox") {
		return RelayMastodon
	}
	return RelayLitePub
}

const relayColumns = `id, url, style, COALESCE(actor_uri, ''), state, follow_activity_id, created_at, updated_at`

func scanRelay(row interface{ Scan(...any) error }) (*Relay, error) {
	var r Relay
	var created, updated int64
	if err := row.Scan(&r.ID, &r.URL, &r.Style, &r.ActorURI, &r.State, &r.FollowActivityID, &created, &updated); err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt = fromMS(created), fromMS(updated)
	return &r, nil
}

// AddRelay subscribes to the relay at rawURL (see RelayStyle): it stores
// the relay as pending and enqueues the instance actor's Follow to it, in
// one transaction. A relay already added is ECONFLICT.
func (s *Store) AddRelay(ctx context.Context, rawURL string) (*Relay, error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, Errorf(EINVALID, "relay %q: want an http(s) URL of a relay inbox or actor", rawURL)
	}
	ref := u.String()
	if s.uris.IsLocal(ref) {
		return nil, Errorf(EINVALID, "relay %q is on this server", ref)
	}
	if blocked, err := s.IsDomainBlocked(ctx, ref); err != nil || blocked {
		if err != nil {
			return nil, err
		}
		return nil, Errorf(EFORBIDDEN, "the domain of relay %q is blocked", ref)
	}
	ev := s.newEvent()
	instance := s.uris.InstanceActor()
	r := &Relay{URL: ref, Style: RelayStyle(ref), State: StatePending, CreatedAt: ev.At, UpdatedAt: ev.At}
	send := RelaySend{Actor: instance}
	var object any = activitypub.Public
	to := []string{activitypub.Public}
	if r.Style == RelayLitePub {
		r.ActorURI, object, to, send.To = ref, ref, []string{ref}, ref
	} else {
		send.Inbox = ref
	}
	doc, id, err := activitypub.NewActivity(s.uris.Base, ev.ID, "Follow", instance, object, to, nil, ev.At)
	if err != nil {
		return nil, fmt.Errorf("store: relay follow: %w", err)
	}
	r.FollowActivityID, send.Activity = id, doc
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO relays (url, style, actor_uri, state, follow_activity_id, created_at, updated_at)
			VALUES (?, ?, ?, 'pending', ?, ?, ?) ON CONFLICT (url) DO NOTHING RETURNING id`,
			r.URL, r.Style, nullString(r.ActorURI), r.FollowActivityID, ms(ev.At), ms(ev.At)).Scan(&r.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return Errorf(ECONFLICT, "relay %q is already added", r.URL)
		}
		if err != nil {
			return err
		}
		return s.enqueueRelaySendTx(ctx, tx, ev.ID, ev.At, send)
	})
	if err != nil {
		return nil, wrap("add relay", err)
	}
	return r, nil
}

// RemoveRelay unsubscribes from the relay rawURL: it deletes the relay and
// enqueues the Undo of its Follow, in one transaction. An unknown relay is
// ENOTFOUND.
func (s *Store) RemoveRelay(ctx context.Context, rawURL string) (*Relay, error) {
	ev := s.newEvent()
	instance := s.uris.InstanceActor()
	var r *Relay
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// One statement removes it: of two removals at once, the second
		// finds nothing and enqueues no second Undo.
		var err error
		r, err = scanRelay(tx.QueryRowContext(ctx, `DELETE FROM relays WHERE url = ? RETURNING `+relayColumns, strings.TrimSpace(rawURL)))
		if errors.Is(err, sql.ErrNoRows) {
			return Errorf(ENOTFOUND, "no relay %q", rawURL)
		}
		if err != nil {
			return err
		}
		var object any = activitypub.Public
		send := RelaySend{Actor: instance, Inbox: r.URL}
		to := []string{activitypub.Public}
		if r.Style == RelayLitePub {
			object, to, send.Inbox, send.To = r.URL, []string{r.URL}, "", r.URL
		}
		follow := map[string]any{"id": r.FollowActivityID, "type": "Follow", "actor": instance, "object": object}
		doc, _, err := activitypub.NewActivity(s.uris.Base, ev.ID, "Undo", instance, follow, to, nil, ev.At)
		if err != nil {
			return err
		}
		send.Activity = doc
		return s.enqueueRelaySendTx(ctx, tx, ev.ID, ev.At, send)
	})
	if err != nil {
		return nil, wrap("remove relay", err)
	}
	return r, nil
}

// Relays lists the relays, oldest first.
func (s *Store) Relays(ctx context.Context) ([]Relay, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT `+relayColumns+` FROM relays ORDER BY id`)
	if err != nil {
		return nil, wrap("relays", err)
	}
	defer rows.Close()
	var out []Relay
	for rows.Next() {
		r, err := scanRelay(rows)
		if err != nil {
			return nil, wrap("relays", err)
		}
		out = append(out, *r)
	}
	return out, wrap("relays", rows.Err())
}

// AnswerRelayTx applies a relay's Accept (accepted) or Reject of the
// instance actor's Follow followID, sent by actor, in tx. The answer must
// come from the relay's host; a Mastodon-style relay's actor is learnt
// from it. It reports whether a relay matched.
func (s *Store) AnswerRelayTx(ctx context.Context, tx *sql.Tx, followID, actor string, accepted bool) (bool, error) {
	if followID == "" {
		return false, nil
	}
	// Locked (forUpdate): two answers at once apply one after the other,
	// and an answer beside the relay's removal finds it removed.
	r, err := scanRelay(tx.QueryRowContext(ctx, `SELECT `+relayColumns+` FROM relays WHERE follow_activity_id = ?`+s.forUpdate(), followID))
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("answer relay", err)
	}
	if !sameHost(r.URL, actor) || (r.Style == RelayLitePub && actor != r.ActorURI) {
		return false, nil
	}
	state := StateRejected
	if accepted {
		state = StateAccepted
	}
	_, err = tx.ExecContext(ctx, `UPDATE relays SET state = ?, actor_uri = ?, updated_at = ? WHERE id = ?`,
		state, actor, ms(s.clock()), r.ID)
	return true, wrap("answer relay", err)
}

// AcceptRelayFollowTx answers a LitePub relay's Follow of the instance
// actor (followID, sent by actor) with an Accept, in tx, when actor is a
// relay courier subscribed to and not rejected. The Accept's event id is
// eventID. It reports whether actor is such a relay.
func (s *Store) AcceptRelayFollowTx(ctx context.Context, tx *sql.Tx, eventID string, at time.Time, followID, actor string) (bool, error) {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM relays WHERE actor_uri = ? AND style = 'litepub' AND state != 'rejected'`,
		actor).Scan(&n); err != nil {
		return false, wrap("accept relay follow", err)
	}
	if n == 0 {
		return false, nil
	}
	instance := s.uris.InstanceActor()
	follow := map[string]any{"id": followID, "type": "Follow", "actor": actor, "object": instance}
	doc, _, err := activitypub.NewActivity(s.uris.Base, eventID, "Accept", instance, follow, []string{actor}, nil, at)
	if err != nil {
		return false, fmt.Errorf("store: relay accept: %w", err)
	}
	return true, s.enqueueRelaySendTx(ctx, tx, eventID, at, RelaySend{Actor: instance, To: actor, Activity: doc})
}

// RelayInboxes returns the inboxes of the accepted Mastodon-style relays,
// to which public activities are delivered too.
func (s *Store) RelayInboxes(ctx context.Context) ([]string, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT url FROM relays WHERE style = 'mastodon' AND state = 'accepted' ORDER BY id`)
	if err != nil {
		return nil, wrap("relay inboxes", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, wrap("relay inboxes", err)
		}
		out = append(out, u)
	}
	return out, wrap("relay inboxes", rows.Err())
}

// EnqueueRelaySendTx enqueues an EventRelaySend event with id eventID in
// tx (conflict-ignored, as every event).
func (s *Store) EnqueueRelaySendTx(ctx context.Context, tx *sql.Tx, eventID string, at time.Time, send RelaySend) error {
	return s.enqueueRelaySendTx(ctx, tx, eventID, at, send)
}

func (s *Store) enqueueRelaySendTx(ctx context.Context, tx *sql.Tx, eventID string, at time.Time, send RelaySend) error {
	payload, err := json.Marshal(send)
	if err != nil {
		return fmt.Errorf("store: relay send: %w", err)
	}
	target := send.Inbox
	if target == "" {
		target = send.To
	}
	host := ""
	if u, err := url.Parse(target); err == nil {
		host = strings.ToLower(u.Host)
	}
	return outbox.Enqueue(ctx, tx, outbox.Event{ID: eventID, Type: EventRelaySend, Target: host, Payload: payload, OccurredAt: at})
}

// sameHost reports whether two URLs have the same host.
func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host != "" && strings.EqualFold(ua.Host, ub.Host)
}
