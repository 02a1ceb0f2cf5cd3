package store

import (
	"context"
)

// FollowedLocally reports whether a local actor follows uri (accepted), or
// uri is an accepted relay, so that what uri announces concerns this
// server.
func (s *Store) FollowedLocally(ctx context.Context, uri string) (bool, error) {
	var ok bool
	err := s.db.Read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM following WHERE target_uri = ? AND state = 'accepted')
		OR EXISTS (SELECT 1 FROM relays WHERE actor_uri = ? AND state = 'accepted')`, uri, uri).Scan(&ok)
	if err != nil {
		return false, wrap("followed locally", err)
	}
	return ok, nil
}

// HasFollowerOn reports whether local actor actorID has an accepted
// follower whose id is on origin (scheme://host, lower case).
func (s *Store) HasFollowerOn(ctx context.Context, actorID int64, origin string) (bool, error) {
	prefix := origin + "/"
	var ok bool
	err := s.db.Read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM followers WHERE actor_id = ? AND state = 'accepted'
		AND lower(substr(follower_uri, 1, ?)) = ?)`, actorID, len(prefix), prefix).Scan(&ok)
	if err != nil {
		return false, wrap("has follower on", err)
	}
	return ok, nil
}
