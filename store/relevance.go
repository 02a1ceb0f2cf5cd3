package store

import "context"

// This file holds the queries of the inbox's relevance rule: whether an
// inbound activity concerns anything held here. Each is one indexed
// lookup on the read pool.

// SubscribedTo reports whether a local actor follows (or has asked to
// follow) the remote actor uri, or uri is a relay the instance actor
// subscribes to (not rejected): what uri sends then concerns this server.
func (s *Store) SubscribedTo(ctx context.Context, uri string) (bool, error) {
	return s.holds(ctx, "subscribed to", `SELECT EXISTS (SELECT 1 FROM following WHERE target_uri = ?)
		OR EXISTS (SELECT 1 FROM relays WHERE actor_uri = ? AND state <> 'rejected')`, uri, uri)
}

// HoldsObject reports whether an object with ActivityPub id uri is stored
// (a tombstone included).
func (s *Store) HoldsObject(ctx context.Context, uri string) (bool, error) {
	return s.holds(ctx, "holds object", `SELECT EXISTS (SELECT 1 FROM objects WHERE uri = ?)`, uri)
}

// HoldsRemoteActor reports whether the remote actor uri matters here: it
// follows or is followed by a local actor, or objects of its are stored.
func (s *Store) HoldsRemoteActor(ctx context.Context, uri string) (bool, error) {
	return s.holds(ctx, "holds remote actor", `SELECT
		EXISTS (SELECT 1 FROM followers WHERE follower_uri = ?) OR
		EXISTS (SELECT 1 FROM following WHERE target_uri = ?) OR
		EXISTS (SELECT 1 FROM objects WHERE attributed_to = ?)`, uri, uri, uri)
}

// HoldsActivity reports whether the activity id by actorURI is stored: a
// reaction (an emoji one too), a follow of a local actor or a block of
// one.
func (s *Store) HoldsActivity(ctx context.Context, id, actorURI string) (bool, error) {
	return s.holds(ctx, "holds activity", `SELECT
		EXISTS (SELECT 1 FROM reactions WHERE activity_uri = ?) OR
		EXISTS (SELECT 1 FROM emoji_reactions WHERE activity_uri = ?) OR
		EXISTS (SELECT 1 FROM followers WHERE follower_uri = ? AND follow_activity_id = ?) OR
		EXISTS (SELECT 1 FROM blocks WHERE remote_uri = ? AND activity_id = ?)`, id, id, actorURI, id, actorURI, id)
}

func (s *Store) holds(ctx context.Context, op, q string, args ...any) (bool, error) {
	var ok bool
	if err := s.db.Read.QueryRowContext(ctx, q, args...).Scan(&ok); err != nil {
		return false, wrap(op, err)
	}
	return ok, nil
}
