package store

import (
	"context"
	"database/sql"
	"errors"
)

// targeted is the object of an activity that also has a target (a Move),
// as emit takes it.
type targeted struct {
	Object any
	Target string
}

// ObjectID is the id of the activity's object, for objectRef.
func (t targeted) ObjectID() string { return objectRef(t.Object) }

// MoveActor records that the local actor moved to the account target and
// enqueues the Move (object: the actor, target: the new account) to its
// followers, in one transaction; the actor's document then names target
// as movedTo. Checking that target lists the actor in alsoKnownAs (a fetch)
// is the caller's, before. A move to a local actor, oneself, a URL that is
// no absolute http(s) URL or a blocked domain is refused, and so is a move
// less than MoveCooldown after the actor's last (EUNPROCESSABLE).
func (s *Store) MoveActor(ctx context.Context, actor *Actor, target string) (*Activity, error) {
	if !absoluteURL(target) {
		return nil, Errorf(EINVALID, "target %q is not an absolute http(s) URL", target)
	}
	if s.uris.IsLocal(target) {
		return nil, Errorf(EUNPROCESSABLE, "moving to a local actor is not supported")
	}
	if blocked, err := s.IsDomainBlocked(ctx, target); err != nil {
		return nil, err
	} else if blocked {
		return nil, Errorf(EFORBIDDEN, "the domain of %q is blocked", target)
	}
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		// Locked: a move beside the actor's deletion lands before it or
		// not at all.
		a, err := s.actorForUpdate(ctx, tx, actor.Name)
		if err != nil {
			return err
		}
		recent, err := movedWithin(tx.QueryRowContext(ctx, `SELECT moved_at FROM actor_moves WHERE actor_id = ?`, a.ID), ev.At)
		if err != nil {
			return err
		}
		if recent {
			return Errorf(EUNPROCESSABLE, "%s moved less than %d days ago: an account moves at most once in %d days",
				a.Name, int(MoveCooldown.Hours()/24), int(MoveCooldown.Hours()/24))
		}
		act, err = s.emitTx(ctx, tx, ev, a, "Move", targeted{Object: a.URI, Target: target},
			[]string{s.uris.Followers(a.Name)}, nil)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO actor_moves (actor_id, target, activity_id, moved_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (actor_id) DO UPDATE SET target = excluded.target, activity_id = excluded.activity_id,
			moved_at = excluded.moved_at`, a.ID, target, act.URI, ms(ev.At))
		return err
	})
	if err != nil {
		return nil, wrap("move actor", err)
	}
	return act, nil
}

// MovedTo returns the account the local actor actorID moved to, or "".
func (s *Store) MovedTo(ctx context.Context, actorID int64) (string, error) {
	var target string
	err := s.db.Read.QueryRowContext(ctx, `SELECT target FROM actor_moves WHERE actor_id = ?`, actorID).Scan(&target)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return target, wrap("moved to", err)
}

// SetMovedTo names target as the account the actor of d moved to, and adds
// the movedTo term to d's context.
func (d *ActorDocument) SetMovedTo(target string) {
	if target == "" {
		return
	}
	d.MovedTo = target
	if l, ok := d.Context.([]any); ok {
		d.Context = append(l, map[string]any{"movedTo": map[string]string{"@id": "as:movedTo", "@type": "@id"}})
	}
}
