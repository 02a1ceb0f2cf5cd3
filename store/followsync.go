package store

import (
	"context"
	"strings"

	"github.com/courier-ap/courier/activitypub"
)

// Followers synchronization (FEP-8fcf): the followers of a local actor on
// one remote server, as the Collection-Synchronization header's digest
// and the partial collection count them. A server's followers are those
// whose id is its URL prefix or lies under it (activitypub.OnPrefix), as
// Mastodon selects them.

// FollowersSyncPath is the path, under an actor's id, of its partial
// followers collection (Mastodon's).
const FollowersSyncPath = "/followers_synchronization"

// MaxFollowersSync bounds the followers one server's partial collection
// lists: beyond it the collection is not served and no header is sent
// (a receiver would stop at one page anyway).
const MaxFollowersSync = 10_000

// followersOnPrefix returns the accepted followers of the local actor
// name on the server of prefix (an activitypub.URLPrefix), sorted, with
// their shared inboxes, at most MaxFollowersSync+1.
func (s *Store) followersOnPrefix(ctx context.Context, name, prefix string) (ids, shared []string, err error) {
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "/%"
	rows, err := s.db.Read.QueryContext(ctx, `SELECT f.follower_uri, COALESCE(f.shared_inbox, '')
		FROM followers f JOIN actors a ON a.id = f.actor_id
		WHERE a.name = ? AND f.state = 'accepted' AND (f.follower_uri = ? OR f.follower_uri LIKE ? ESCAPE '\')
		ORDER BY f.follower_uri LIMIT ?`, name, prefix, like, MaxFollowersSync+1)
	if err != nil {
		return nil, nil, wrap("followers on server", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, si string
		if err := rows.Scan(&id, &si); err != nil {
			return nil, nil, wrap("followers on server", err)
		}
		if activitypub.OnPrefix(id, prefix) { // LIKE ignores case on SQLite
			ids, shared = append(ids, id), append(shared, si)
		}
	}
	return ids, shared, wrap("followers on server", rows.Err())
}

// FollowersSync returns the Collection-Synchronization header of a
// delivery of the local actor actorURI's followers-only activity to
// inbox, and true, when inbox is the shared inbox of one of its accepted
// followers; the digest covers its followers on inbox's server. Else
// false.
func (s *Store) FollowersSync(ctx context.Context, actorURI, inbox string) (activitypub.CollectionSync, bool, error) {
	name, ok := s.uris.ActorName(actorURI)
	prefix := activitypub.URLPrefix(inbox)
	if !ok || prefix == "" {
		return activitypub.CollectionSync{}, false, nil
	}
	ids, shared, err := s.followersOnPrefix(ctx, name, prefix)
	if err != nil || len(ids) > MaxFollowersSync {
		return activitypub.CollectionSync{}, false, err
	}
	for _, si := range shared {
		if si == inbox {
			return activitypub.CollectionSync{CollectionID: s.uris.Followers(name),
				URL: s.uris.Actor(name) + FollowersSyncPath, Digest: activitypub.FollowersDigest(ids)}, true, nil
		}
	}
	return activitypub.CollectionSync{}, false, nil
}

// FollowersOn returns the accepted followers of the local actor name on
// the server of prefix (an activitypub.URLPrefix), sorted: the items of
// its partial followers collection. More than MaxFollowersSync is EINVALID.
func (s *Store) FollowersOn(ctx context.Context, name, prefix string) ([]string, error) {
	ids, _, err := s.followersOnPrefix(ctx, name, prefix)
	if err != nil {
		return nil, err
	}
	if len(ids) > MaxFollowersSync {
		return nil, Errorf(EINVALID, "more than %d followers on %s", MaxFollowersSync, prefix)
	}
	return ids, nil
}

// LocalFollow is a local actor's follow of a remote actor.
type LocalFollow struct {
	// ActorID is the local actor's row id (set by LocalFollowersOfTx).
	ActorID int64
	Name    string // the local actor's name
	URI     string // its id
	State   string // StatePending or StateAccepted
}

// LocalFollowsOf returns the local actors' follows of the remote actor
// remoteURI, accepted and pending, by actor name: the receiving side of
// followers synchronization (the local actors a remote server should list
// as its actor's followers here are the accepted ones). More than
// MaxFollowersSync is EINVALID.
func (s *Store) LocalFollowsOf(ctx context.Context, remoteURI string) ([]LocalFollow, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT a.name, f.state FROM following f JOIN actors a ON a.id = f.actor_id
		WHERE f.target_uri = ? AND a.deleted_at IS NULL ORDER BY a.name LIMIT ?`, remoteURI, MaxFollowersSync+1)
	if err != nil {
		return nil, wrap("local follows", err)
	}
	defer rows.Close()
	var out []LocalFollow
	for rows.Next() {
		var f LocalFollow
		if err := rows.Scan(&f.Name, &f.State); err != nil {
			return nil, wrap("local follows", err)
		}
		f.URI = s.uris.Actor(f.Name)
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("local follows", err)
	}
	if len(out) > MaxFollowersSync {
		return nil, Errorf(EINVALID, "more than %d local follows of %s", MaxFollowersSync, remoteURI)
	}
	return out, nil
}
