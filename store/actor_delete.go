package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DeleteActor deletes the local actor name: in one transaction it marks
// the actor deleted, records its name among the deleted actors for good
// (DeletedActor; the name is never given to a new actor) and enqueues its
// Delete, addressed to the public and its followers. The actor then answers as unknown (ActorByName,
// Authenticate), but its row, key and followers stay, so the fan-out finds
// every follower and every delivery of the Delete is still signed
// (ActorByURI, which signing uses, still returns it); ReapDeletedActors
// removes the row once every delivery has finished or died. Its objects
// become tombstones in the same transaction (410 Gone). An unknown or
// already deleted actor is ENOTFOUND.
func (s *Store) DeleteActor(ctx context.Context, name string) (*Activity, error) {
	var act *Activity
	if !ValidName(name) {
		return nil, Errorf(ENOTFOUND, "no actor %q", name)
	}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// One conditional update marks the actor deleted: of two deletions
		// at once, the second finds it deleted and changes nothing.
		ev := s.newEvent()
		a, err := s.scanActor(tx.QueryRowContext(ctx, `UPDATE actors SET deleted_at = ?, updated_at = ?
			WHERE name = ? AND deleted_at IS NULL RETURNING `+actorColumns, ms(ev.At), ms(ev.At), name))
		if err != nil {
			return wrap("delete actor", notFound(err, ENOTFOUND, "no actor %q", name))
		}
		if act, err = s.emitTx(ctx, tx, ev, a, "Delete", a.URI, []string{Public}, []string{s.uris.Followers(a.Name)}); err != nil {
			return err
		}
		// Its objects become tombstones: they answer 410 Gone with a
		// Tombstone (formerType, deleted), as peers that drop an actor's
		// content on its Delete expect, and outlive the actor's row.
		if _, err := tombstoneObjects(ctx, tx, ev.At, `actor_id = ? AND deleted_at IS NULL`, a.ID); err != nil {
			return wrap("delete actor", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO deleted_actors (name, deleted_at) VALUES (?, ?)
			ON CONFLICT (name) DO NOTHING`, a.Name, ms(ev.At)); err != nil {
			return wrap("delete actor", err)
		}
		// It leaves the other local actors' followers and following at
		// once, whether its Delete reaches them (a follower of it) or not
		// (one it follows only); its own rows stay for the Delete's
		// delivery.
		return s.RemoveLocalTiesTx(ctx, tx, a.URI)
	})
	if err != nil {
		return nil, err
	}
	return act, nil
}

// DeletedActor returns when the local actor name was deleted: it answers
// for an actor whose Delete is being delivered as for one already removed
// (ReapDeletedActors). A name never deleted is ENOTFOUND.
func (s *Store) DeletedActor(ctx context.Context, name string) (time.Time, error) {
	return s.deletedActor(ctx, s.db.Read, name)
}

func (s *Store) deletedActor(ctx context.Context, q queryer, name string) (time.Time, error) {
	var at int64
	err := q.QueryRowContext(ctx, `SELECT deleted_at FROM deleted_actors WHERE name = ?`, name).Scan(&at)
	if err != nil {
		return time.Time{}, wrap("deleted actor", notFound(err, ENOTFOUND, "no deleted actor %q", name))
	}
	return fromMS(at), nil
}

// DeliveryFinisher reports whether the outgoing activity activityID,
// enqueued by the event eventID, is past delivery: fanned out, and each of
// its deliveries delivered or given up (dead-lettered, refused, drained).
type DeliveryFinisher interface {
	DeliveryFinished(ctx context.Context, eventID, activityID string) (bool, error)
}

// ReapDeletedActors removes each deleted local actor, its key with it,
// whose Delete is past delivery (d), and returns how many it removed. Its
// activities and follows go with it; its objects' tombstones stay.
func (s *Store) ReapDeletedActors(ctx context.Context, d DeliveryFinisher) (int, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT a.id, a.name, COALESCE(act.uri, ''), COALESCE(act.event_id, '')
		FROM actors a
		LEFT JOIN activities act ON act.actor_id = a.id AND act.type = 'Delete' AND act.object_uri = ? || '/users/' || a.name
		WHERE a.deleted_at IS NOT NULL`, s.uris.Base)
	if err != nil {
		return 0, wrap("deleted actors", err)
	}
	type gone struct {
		id               int64
		name, uri, event string
	}
	var all []gone
	for rows.Next() {
		var g gone
		if err := rows.Scan(&g.id, &g.name, &g.uri, &g.event); err != nil {
			rows.Close()
			return 0, wrap("deleted actors", err)
		}
		all = append(all, g)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, wrap("deleted actors", err)
	}
	n := 0
	for _, g := range all {
		if g.uri != "" {
			done, err := d.DeliveryFinished(ctx, g.event, g.uri)
			if err != nil {
				return n, fmt.Errorf("store: delivery of %s: %w", g.uri, err)
			}
			if !done {
				continue
			}
		}
		if err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			// The tombstones of its objects stay, detached, so their
			// URLs go on answering 410 rather than 404.
			if _, err := tx.ExecContext(ctx, `UPDATE objects SET actor_id = NULL
				WHERE actor_id = ? AND deleted_at IS NOT NULL`, g.id); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM actors WHERE id = ? AND deleted_at IS NOT NULL`, g.id)
			return err
		}); err != nil {
			return n, wrap("reap actor", err)
		}
		n++
	}
	return n, nil
}

// DefaultReapInterval is how often a KeyReaper looks for deleted actors.
const DefaultReapInterval = time.Minute

// KeyReaper removes deleted local actors, keys included, once their
// Delete is past delivery (Store.ReapDeletedActors), every Interval.
type KeyReaper struct {
	Store      *Store
	Deliveries DeliveryFinisher
	// Interval is the time between two passes (default DefaultReapInterval).
	Interval time.Duration
	// Logger receives one line per removed actor count and errors (nil
	// discards).
	Logger *slog.Logger
}

// Run reaps until ctx ends; it returns nil then.
func (k KeyReaper) Run(ctx context.Context) error {
	if k.Interval <= 0 {
		k.Interval = DefaultReapInterval
	}
	if k.Logger == nil {
		k.Logger = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := k.Store.ReapDeletedActors(ctx, k.Deliveries)
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			k.Logger.WarnContext(ctx, "store: removing deleted actors", "err", err)
		case n > 0:
			k.Logger.InfoContext(ctx, "store: deleted actors removed, their Delete delivered", "count", n)
		}
	}
}
