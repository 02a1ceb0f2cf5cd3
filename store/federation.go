package store

import (
	"context"
)

// FollowedLocally reports whether a local actor follows uri (accepted), so
// that what uri announces concerns this server.
func (s *Store) FollowedLocally(ctx context.Context, uri string) (bool, error) {
	var ok bool
	err := s.db.Read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM following WHERE target_uri = ? AND state = 'accepted')`, uri).Scan(&ok)
	if err != nil {
		return false, wrap("followed locally", err)
	}
	return ok, nil
}
