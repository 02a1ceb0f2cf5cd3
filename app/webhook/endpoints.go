package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// MaxEndpoints bounds how many endpoints courier keeps.
const MaxEndpoints = 1000

// Add adds an endpoint at rawURL for the local actor named actor (every
// local actor when empty), taking the event types events (every type when
// empty). It returns the endpoint and its secret, which is never shown
// again. An unknown actor is store.ENOTFOUND; a malformed URL or an
// unknown event type store.EINVALID.
func (s *Service) Add(ctx context.Context, rawURL, actor string, events []string) (Endpoint, string, error) {
	if err := s.validURL(rawURL); err != nil {
		return Endpoint{}, "", err
	}
	evs, err := normalizeEvents(events)
	if err != nil {
		return Endpoint{}, "", err
	}
	secret := NewSecret()
	now := s.cfg.Now()
	var ep Endpoint
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		var actorID sql.NullInt64
		if actor != "" {
			err := tx.QueryRowContext(ctx, `SELECT id FROM actors WHERE name = ?`, actor).Scan(&actorID)
			if errors.Is(err, sql.ErrNoRows) {
				return store.Errorf(store.ENOTFOUND, "no local actor named %q", actor)
			}
			if err != nil {
				return err
			}
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_endpoints`).Scan(&n); err != nil {
			return err
		}
		if n >= MaxEndpoints {
			return store.Errorf(store.ECONFLICT, "courier keeps at most %d webhook endpoints", MaxEndpoints)
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO webhook_endpoints (url, actor_id, events, created_at)
			VALUES (?, ?, ?, ?) RETURNING id`, rawURL, actorID, strings.Join(evs, ","), now.UnixMilli()).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_secrets (endpoint_id, secret, created_at) VALUES (?, ?, ?)`,
			id, secret, now.UnixMilli()); err != nil {
			return err
		}
		ep = Endpoint{ID: id, URL: rawURL, Actor: actor, Events: evs, CreatedAt: time.UnixMilli(now.UnixMilli()).UTC(),
			Secrets: 1, Host: HostKey(id)}
		return nil
	})
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("webhook: add endpoint: %w", err)
	}
	s.forget(ep.ID)
	s.cfg.Logger.InfoContext(ctx, "webhook: endpoint added", "endpoint", ep.ID, "actor", actor)
	return ep, secret, nil
}

// normalizeEvents checks event types against KnownTypes, sorted and
// without repeats.
func normalizeEvents(events []string) ([]string, error) {
	known := KnownTypes()
	var out []string
	for _, e := range events {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if !slices.Contains(known, e) {
			return nil, store.Errorf(store.EINVALID, "event type %q: want one of %s", e, strings.Join(known, ", "))
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out, nil
}

// List returns every endpoint, by id.
func (s *Service) List(ctx context.Context) ([]Endpoint, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT e.id, e.url, COALESCE(a.name, ''), e.events, e.created_at,
		(SELECT COUNT(*) FROM webhook_secrets k WHERE k.endpoint_id = e.id AND (k.expires_at IS NULL OR k.expires_at > ?))
		FROM webhook_endpoints e LEFT JOIN actors a ON a.id = e.actor_id ORDER BY e.id`, s.cfg.Now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("webhook: list endpoints: %w", err)
	}
	defer rows.Close()
	out := []Endpoint{}
	for rows.Next() {
		var ep Endpoint
		var events string
		var created int64
		if err := rows.Scan(&ep.ID, &ep.URL, &ep.Actor, &events, &created, &ep.Secrets); err != nil {
			return nil, fmt.Errorf("webhook: list endpoints: %w", err)
		}
		if events != "" {
			ep.Events = strings.Split(events, ",")
		}
		ep.CreatedAt = time.UnixMilli(created).UTC()
		ep.Host = HostKey(ep.ID)
		out = append(out, ep)
	}
	return out, rows.Err()
}

// Get returns endpoint id; an unknown one is store.ENOTFOUND.
func (s *Service) Get(ctx context.Context, id int64) (Endpoint, error) {
	eps, err := s.List(ctx)
	if err != nil {
		return Endpoint{}, err
	}
	for _, ep := range eps {
		if ep.ID == id {
			return ep, nil
		}
	}
	return Endpoint{}, store.Errorf(store.ENOTFOUND, "no webhook endpoint %d", id)
}

// Remove removes endpoint id and its secrets; its events still queued are
// dropped when their turn comes. An unknown one is store.ENOTFOUND.
func (s *Service) Remove(ctx context.Context, id int64) error {
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_secrets WHERE endpoint_id = ?`, id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_endpoints WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.Errorf(store.ENOTFOUND, "no webhook endpoint %d", id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("webhook: remove endpoint %d: %w", id, err)
	}
	s.forget(id)
	s.cfg.Logger.InfoContext(ctx, "webhook: endpoint removed", "endpoint", id)
	return nil
}

// Rotate gives endpoint id a new secret and returns it (never shown
// again); the secrets it had keep signing beside it for RotateGrace (an
// older grace is not extended), so receivers can switch without losing a
// message. An unknown endpoint is store.ENOTFOUND.
func (s *Service) Rotate(ctx context.Context, id int64) (string, time.Time, error) {
	secret := NewSecret()
	now := s.cfg.Now()
	until := now.Add(s.cfg.RotateGrace)
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM webhook_endpoints WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return store.Errorf(store.ENOTFOUND, "no webhook endpoint %d", id)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_secrets SET expires_at = ?
			WHERE endpoint_id = ? AND (expires_at IS NULL OR expires_at > ?)`, until.UnixMilli(), id, until.UnixMilli()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_secrets WHERE endpoint_id = ? AND expires_at <= ?`,
			id, now.UnixMilli()); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO webhook_secrets (endpoint_id, secret, created_at) VALUES (?, ?, ?)`,
			id, secret, now.UnixMilli())
		return err
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("webhook: rotate secret of endpoint %d: %w", id, err)
	}
	s.forget(id)
	s.cfg.Logger.InfoContext(ctx, "webhook: secret rotated", "endpoint", id, "old_until", until)
	return secret, until, nil
}

// Test enqueues a webhook.test event to endpoint id and returns its event
// id (the webhook-id the endpoint will see). An unknown endpoint is
// store.ENOTFOUND.
func (s *Service) Test(ctx context.Context, id int64) (string, error) {
	var eventID string
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM webhook_endpoints WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return store.Errorf(store.ENOTFOUND, "no webhook endpoint %d", id)
		}
		if err != nil {
			return err
		}
		now := s.cfg.Now().UTC()
		eventID = outbox.ChildID("test\x00"+strconv.FormatInt(now.UnixNano(), 10), strconv.FormatInt(id, 10))
		ev, err := s.event(id, eventID, now, Payload{Type: TypeTest, Timestamp: now, Data: Data{Endpoint: id}})
		if err != nil {
			return err
		}
		return outbox.Enqueue(ctx, tx, ev)
	})
	if err != nil {
		return "", fmt.Errorf("webhook: test endpoint %d: %w", id, err)
	}
	return eventID, nil
}

// event is the outbox event that sends p to endpoint id.
func (s *Service) event(id int64, eventID string, now time.Time, p Payload) (outbox.Event, error) {
	body, err := jsonMarshal(p)
	if err != nil {
		return outbox.Event{}, err
	}
	pl, err := jsonMarshal(post{Endpoint: id, Type: p.Type, Body: string(body)})
	if err != nil {
		return outbox.Event{}, err
	}
	return outbox.Event{ID: eventID, Type: EventPost, Target: HostKey(id), Payload: pl, OccurredAt: now}, nil
}
