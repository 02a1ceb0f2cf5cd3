package store

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Follow states.
const (
	StatePending  = "pending"
	StateAccepted = "accepted"
	// StateRejected is accepted by SetFollowingStateTx: the request is removed.
	StateRejected = "rejected"
)

// Follower is a remote actor following a local actor.
type Follower struct {
	ActorID          int64 // the local actor followed
	URI              string
	Inbox            string
	SharedInbox      string
	FollowActivityID string
	State            string // StatePending or StateAccepted
	CreatedAt        time.Time
}

// AddFollowerTx records (or refreshes) f in tx. State defaults to
// StateAccepted. It reports whether the follower is new.
func (s *Store) AddFollowerTx(ctx context.Context, tx *sql.Tx, f Follower) (bool, error) {
	if f.ActorID == 0 || f.URI == "" || f.Inbox == "" {
		return false, Errorf(EINVALID, "follower needs a local actor, an id and an inbox")
	}
	if f.State == "" {
		f.State = StateAccepted
	}
	if f.State != StatePending && f.State != StateAccepted {
		return false, Errorf(EINVALID, "follower state %q is invalid", f.State)
	}
	t := s.clock()
	res, err := tx.ExecContext(ctx, `INSERT INTO followers
		(actor_id, follower_uri, inbox, shared_inbox, follow_activity_id, state, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (actor_id, follower_uri) DO NOTHING`,
		f.ActorID, f.URI, f.Inbox, nullString(f.SharedInbox), nullString(f.FollowActivityID), f.State, ms(t), ms(t))
	if err != nil {
		return false, wrap("add follower", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return true, nil
	}
	// Known follower: refresh inboxes and the Follow id; never downgrade an
	// accepted follower to pending.
	_, err = tx.ExecContext(ctx, `UPDATE followers SET inbox = ?, shared_inbox = ?,
		follow_activity_id = COALESCE(?, follow_activity_id),
		state = CASE WHEN state = 'accepted' THEN 'accepted' ELSE ? END, updated_at = ?
		WHERE actor_id = ? AND follower_uri = ?`,
		f.Inbox, nullString(f.SharedInbox), nullString(f.FollowActivityID), f.State, ms(t), f.ActorID, f.URI)
	return false, wrap("add follower", err)
}

// AcceptFollowerTx marks a pending follower accepted in tx. It reports
// whether a pending row changed.
func (s *Store) AcceptFollowerTx(ctx context.Context, tx *sql.Tx, actorID int64, followerURI string) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE followers SET state = 'accepted', updated_at = ?
		WHERE actor_id = ? AND follower_uri = ? AND state = 'pending'`, ms(s.clock()), actorID, followerURI)
	if err != nil {
		return false, wrap("accept follower", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// RemoveFollowerTx removes followerURI from the followers of the local
// actor actorID in tx. It reports whether a row was removed.
func (s *Store) RemoveFollowerTx(ctx context.Context, tx *sql.Tx, actorID int64, followerURI string) (bool, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM followers WHERE actor_id = ? AND follower_uri = ?`, actorID, followerURI)
	if err != nil {
		return false, wrap("remove follower", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// RemoveFollowerEverywhere removes remoteActorURI from the followers of
// every local actor and marks its cache entry gone, in one transaction; the
// delivery worker calls it when the actor's inbox answers 410 Gone. It
// returns the number of follower rows removed.
func (s *Store) RemoveFollowerEverywhere(ctx context.Context, remoteActorURI string) (int, error) {
	var n int64
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM followers WHERE follower_uri = ?`, remoteActorURI)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return s.MarkRemoteActorGoneTx(ctx, tx, remoteActorURI)
	})
	return int(n), wrap("remove follower everywhere", err)
}

// FollowerInboxes returns the inboxes a public or followers-only activity
// of the local actor actorID goes to: for each accepted follower its host's
// shared inbox where it has one, else its own inbox, each inbox once,
// sorted. Followers on domains the operator blocked are left out.
func (s *Store) FollowerInboxes(ctx context.Context, actorID int64) ([]string, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT follower_uri, inbox, COALESCE(shared_inbox, '')
		FROM followers WHERE actor_id = ? AND state = 'accepted'`, actorID)
	if err != nil {
		return nil, wrap("follower inboxes", err)
	}
	defer rows.Close()
	type row struct{ uri, inbox, shared string }
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.uri, &r.inbox, &r.shared); err != nil {
			return nil, wrap("follower inboxes", err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("follower inboxes", err)
	}
	blocked, err := s.domainBlockSet(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, r := range all {
		if domainBlocked(blocked, hostOf(r.uri)) {
			continue
		}
		in := r.inbox
		if r.shared != "" {
			in = r.shared
		}
		if !seen[in] {
			seen[in] = true
			out = append(out, in)
		}
	}
	sort.Strings(out)
	return out, nil
}

// IsFollower reports whether followerURI is an accepted follower of the
// local actor actorID.
func (s *Store) IsFollower(ctx context.Context, actorID int64, followerURI string) (bool, error) {
	var n int
	err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM followers
		WHERE actor_id = ? AND follower_uri = ? AND state = 'accepted'`, actorID, followerURI).Scan(&n)
	return n > 0, wrap("is follower", err)
}

// Followers returns the followers of actorID in state (StateAccepted or
// StatePending), oldest first, limit at offset, and the total count.
func (s *Store) Followers(ctx context.Context, actorID int64, state string, offset, limit int) ([]Follower, int, error) {
	var total int
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND state = ?`,
		actorID, state).Scan(&total); err != nil {
		return nil, 0, wrap("followers", err)
	}
	rows, err := s.db.Read.QueryContext(ctx, `SELECT follower_uri, inbox, COALESCE(shared_inbox, ''),
		COALESCE(follow_activity_id, ''), state, created_at
		FROM followers WHERE actor_id = ? AND state = ? ORDER BY created_at, follower_uri LIMIT ? OFFSET ?`,
		actorID, state, clampLimit(limit), max(offset, 0))
	if err != nil {
		return nil, 0, wrap("followers", err)
	}
	defer rows.Close()
	var out []Follower
	for rows.Next() {
		f := Follower{ActorID: actorID}
		var created int64
		if err := rows.Scan(&f.URI, &f.Inbox, &f.SharedInbox, &f.FollowActivityID, &f.State, &created); err != nil {
			return nil, 0, wrap("followers", err)
		}
		f.CreatedAt = fromMS(created)
		out = append(out, f)
	}
	return out, total, wrap("followers", rows.Err())
}

// Following is a local actor's follow of a remote actor.
type Following struct {
	ActorID          int64
	TargetURI        string
	FollowActivityID string
	State            string
	CreatedAt        time.Time
}

// FollowingOf returns the remote actors actorID follows (accepted only),
// oldest first, limit at offset, and the total count.
func (s *Store) FollowingOf(ctx context.Context, actorID int64, offset, limit int) ([]Following, int, error) {
	var total int
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM following WHERE actor_id = ? AND state = 'accepted'`,
		actorID).Scan(&total); err != nil {
		return nil, 0, wrap("following", err)
	}
	rows, err := s.db.Read.QueryContext(ctx, `SELECT target_uri, follow_activity_id, state, created_at
		FROM following WHERE actor_id = ? AND state = 'accepted' ORDER BY created_at, target_uri LIMIT ? OFFSET ?`,
		actorID, clampLimit(limit), max(offset, 0))
	if err != nil {
		return nil, 0, wrap("following", err)
	}
	defer rows.Close()
	var out []Following
	for rows.Next() {
		f := Following{ActorID: actorID}
		var created int64
		if err := rows.Scan(&f.TargetURI, &f.FollowActivityID, &f.State, &created); err != nil {
			return nil, 0, wrap("following", err)
		}
		f.CreatedAt = fromMS(created)
		out = append(out, f)
	}
	return out, total, wrap("following", rows.Err())
}

// FollowingState returns the state of actorID's follow of targetURI, or
// ENOTFOUND.
func (s *Store) FollowingState(ctx context.Context, actorID int64, targetURI string) (string, error) {
	var st string
	err := s.db.Read.QueryRowContext(ctx, `SELECT state FROM following WHERE actor_id = ? AND target_uri = ?`,
		actorID, targetURI).Scan(&st)
	if err != nil {
		return "", wrap("following state", notFound(err, ENOTFOUND, "not following %q", targetURI))
	}
	return st, nil
}

// LocalFollowersOfTx returns the local actors (not deleted) whose follow
// of the remote actor remoteURI is accepted, by row id, as tx sees them:
// those an activity of remoteURI reaches through the shared inbox.
func (s *Store) LocalFollowersOfTx(ctx context.Context, tx *sql.Tx, remoteURI string) ([]LocalFollow, error) {
	rows, err := tx.QueryContext(ctx, `SELECT a.id, a.name FROM following f JOIN actors a ON a.id = f.actor_id
		WHERE f.target_uri = ? AND f.state = 'accepted' AND a.deleted_at IS NULL ORDER BY a.id`, remoteURI)
	if err != nil {
		return nil, wrap("local followers", err)
	}
	defer rows.Close()
	var out []LocalFollow
	for rows.Next() {
		f := LocalFollow{State: StateAccepted}
		if err := rows.Scan(&f.ActorID, &f.Name); err != nil {
			return nil, wrap("local followers", err)
		}
		f.URI = s.uris.Actor(f.Name)
		out = append(out, f)
	}
	return out, wrap("local followers", rows.Err())
}

// FollowingRef names a local actor's follow of a remote actor, as an
// inbound Accept or Reject does.
type FollowingRef struct {
	// Target is the remote actor that answered; required. Only a follow of
	// Target is ever changed, so a peer cannot answer for another actor.
	Target string
	// FollowActivityID is the id of courier's Follow, when the answer names
	// it.
	FollowActivityID string
	// LocalActor is the id of the local follower, when known.
	LocalActor string
}

// SetFollowingStateTx applies an answer to a local actor's Follow in tx:
// StateAccepted marks it accepted, StateRejected removes it. It returns
// the number of follows changed (0 when none matched).
func (s *Store) SetFollowingStateTx(ctx context.Context, tx *sql.Tx, ref FollowingRef, state string) (int, error) {
	if ref.Target == "" || (ref.FollowActivityID == "" && ref.LocalActor == "") {
		return 0, Errorf(EINVALID, "a follow answer needs the target and the Follow id or the local actor")
	}
	where := `target_uri = ?`
	args := []any{ref.Target}
	if ref.FollowActivityID != "" {
		where += ` AND follow_activity_id = ?`
		args = append(args, ref.FollowActivityID)
	}
	if ref.LocalActor != "" {
		a, err := s.localActor(ctx, tx, ref.LocalActor)
		if err != nil {
			return 0, err
		}
		where += ` AND actor_id = ?`
		args = append(args, a.ID)
	}
	var res sql.Result
	var err error
	switch state {
	case StateAccepted:
		res, err = tx.ExecContext(ctx, `UPDATE following SET state = 'accepted', updated_at = ? WHERE `+where,
			append([]any{ms(s.clock())}, args...)...)
	case StateRejected:
		res, err = tx.ExecContext(ctx, `DELETE FROM following WHERE `+where, args...)
	default:
		return 0, Errorf(EINVALID, "following state %q is invalid", state)
	}
	if err != nil {
		return 0, wrap("set following state", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// Block directions.
const (
	// BlockOutgoing: a local actor blocks a remote actor.
	BlockOutgoing = "outgoing"
	// BlockIncoming: a remote actor blocked a local actor.
	BlockIncoming = "incoming"
)

// AddIncomingBlockTx records that remoteURI blocked the local actor actorID,
// in tx, and severs the follows between them both ways, as peers expect.
// It reports whether the block is new.
func (s *Store) AddIncomingBlockTx(ctx context.Context, tx *sql.Tx, actorID int64, remoteURI, activityID string) (bool, error) {
	return s.addBlockTx(ctx, tx, actorID, remoteURI, BlockIncoming, activityID)
}

// RemoveIncomingBlockTx forgets remoteURI's block of actorID (an Undo of
// Block), in tx. It reports whether a row was removed.
func (s *Store) RemoveIncomingBlockTx(ctx context.Context, tx *sql.Tx, actorID int64, remoteURI string) (bool, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM blocks WHERE actor_id = ? AND remote_uri = ? AND direction = 'incoming'`,
		actorID, remoteURI)
	if err != nil {
		return false, wrap("remove block", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

func (s *Store) addBlockTx(ctx context.Context, tx *sql.Tx, actorID int64, remoteURI, direction, activityID string) (bool, error) {
	// Locked as BlocksTx locks: a follow added beside this block either
	// saw it or is severed by it.
	if err := s.lockActorTx(ctx, tx, actorID); err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO blocks (actor_id, remote_uri, direction, activity_id, created_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (actor_id, remote_uri, direction) DO NOTHING`,
		actorID, remoteURI, direction, nullString(activityID), ms(s.clock()))
	if err != nil {
		return false, wrap("add block", err)
	}
	n, _ := res.RowsAffected()
	for _, q := range []string{
		`DELETE FROM followers WHERE actor_id = ? AND follower_uri = ?`,
		`DELETE FROM following WHERE actor_id = ? AND target_uri = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, actorID, remoteURI); err != nil {
			return false, wrap("add block", err)
		}
	}
	return n > 0, nil
}

// Blocks reports whether the local actor actorID blocks remoteURI (an
// outgoing block), so inbound activities from it are dropped.
func (s *Store) Blocks(ctx context.Context, actorID int64, remoteURI string) (bool, error) {
	return blockExists(ctx, s.db.Read, "blocks", actorID, remoteURI, BlockOutgoing)
}

// BlocksTx is Blocks read in tx, for a transaction that goes on to add a
// follow when there is no block: it first locks the local actor
// (lockActorTx), as adding a block does, so that a block committed beside
// tx is seen by it, or sees the follow it adds and severs it.
func (s *Store) BlocksTx(ctx context.Context, tx *sql.Tx, actorID int64, remoteURI string) (bool, error) {
	if err := s.lockActorTx(ctx, tx, actorID); err != nil {
		return false, err
	}
	return blockExists(ctx, tx, "blocks", actorID, remoteURI, BlockOutgoing)
}

// BlocksReadTx is Blocks as tx sees it, without BlocksTx's lock of the
// local actor: for a transaction that adds no follow on the strength of
// it (the application's audience of an imported activity).
func (s *Store) BlocksReadTx(ctx context.Context, tx *sql.Tx, actorID int64, remoteURI string) (bool, error) {
	return blockExists(ctx, tx, "blocks", actorID, remoteURI, BlockOutgoing)
}

// BlockedBy reports whether remoteURI blocked the local actor actorID.
func (s *Store) BlockedBy(ctx context.Context, actorID int64, remoteURI string) (bool, error) {
	return blockExists(ctx, s.db.Read, "blocked by", actorID, remoteURI, BlockIncoming)
}

// blockExists reports whether the block of the given direction between
// the local actor actorID and remoteURI exists, read through q; op names
// the check in errors.
func blockExists(ctx context.Context, q queryer, op string, actorID int64, remoteURI, direction string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM blocks
		WHERE actor_id = ? AND remote_uri = ? AND direction = ?`, actorID, remoteURI, direction).Scan(&n)
	return n > 0, wrap(op, err)
}

// Reaction types.
const (
	ReactionLike     = "Like"
	ReactionAnnounce = "Announce"
)

// Reaction is a Like or Announce of an object.
type Reaction struct {
	ActivityURI string
	Type        string // ReactionLike or ReactionAnnounce
	ActorURI    string
	ObjectURI   string
}

// AddReactionTx records r in tx. A repeated activity, or a second reaction
// of the same type by the same actor on the same object, is ignored; it
// reports whether r is new.
func (s *Store) AddReactionTx(ctx context.Context, tx *sql.Tx, r Reaction) (bool, error) {
	if r.Type != ReactionLike && r.Type != ReactionAnnounce {
		return false, Errorf(EINVALID, "reaction type %q is invalid", r.Type)
	}
	if r.ActivityURI == "" || r.ActorURI == "" || r.ObjectURI == "" {
		return false, Errorf(EINVALID, "reaction needs an activity, an actor and an object")
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO reactions (activity_uri, type, actor_uri, object_uri, created_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, r.ActivityURI, r.Type, r.ActorURI, r.ObjectURI, ms(s.clock()))
	if err != nil {
		return false, wrap("add reaction", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// RemoveReactionTx removes a reaction by actorURI in tx (an Undo): the one
// with activity id r.ActivityURI, or else the one of r.Type on r.ObjectURI.
// A reaction by another actor is never removed. It reports whether a row
// was removed.
func (s *Store) RemoveReactionTx(ctx context.Context, tx *sql.Tx, r Reaction) (bool, error) {
	if r.ActorURI == "" {
		return false, Errorf(EINVALID, "reaction undo needs the actor")
	}
	var res sql.Result
	var err error
	switch {
	case r.ActivityURI != "":
		res, err = tx.ExecContext(ctx, `DELETE FROM reactions WHERE activity_uri = ? AND actor_uri = ?`, r.ActivityURI, r.ActorURI)
		if err == nil {
			if n, _ := res.RowsAffected(); n == 0 && r.Type != "" && r.ObjectURI != "" {
				res, err = tx.ExecContext(ctx, `DELETE FROM reactions WHERE type = ? AND actor_uri = ? AND object_uri = ?`,
					r.Type, r.ActorURI, r.ObjectURI)
			}
		}
	case r.Type != "" && r.ObjectURI != "":
		res, err = tx.ExecContext(ctx, `DELETE FROM reactions WHERE type = ? AND actor_uri = ? AND object_uri = ?`,
			r.Type, r.ActorURI, r.ObjectURI)
	default:
		return false, Errorf(EINVALID, "reaction undo needs the activity id or the type and object")
	}
	if err != nil {
		return false, wrap("remove reaction", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ReactionCounts returns how many Likes and Announces objectURI has.
func (s *Store) ReactionCounts(ctx context.Context, objectURI string) (likes, shares int, err error) {
	err = s.db.Read.QueryRowContext(ctx, `SELECT
		COALESCE(SUM(CASE WHEN type = 'Like' THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN type = 'Announce' THEN 1 ELSE 0 END), 0)
		FROM reactions WHERE object_uri = ?`, objectURI).Scan(&likes, &shares)
	return likes, shares, wrap("reaction counts", err)
}

// DomainBlock is a remote domain the operator refuses to federate with.
type DomainBlock struct {
	Domain    string
	Reason    string
	CreatedAt time.Time
}

// NormalizeDomain lower-cases a domain, drops a port and a trailing dot, and
// accepts a URL in its place. It returns "" for something that is no domain.
func NormalizeDomain(d string) string {
	d = strings.TrimSpace(d)
	if strings.Contains(d, "://") {
		d = hostOf(d)
	} else if h, err := url.Parse("//" + d); err == nil {
		d = h.Hostname()
	}
	d = strings.TrimSuffix(strings.ToLower(d), ".")
	if d == "" || strings.ContainsAny(d, " /?#@") || len(d) > 253 {
		return ""
	}
	return d
}

// AddDomainBlock blocks domain and its subdomains. Blocking a blocked
// domain updates its reason.
func (s *Store) AddDomainBlock(ctx context.Context, domain, reason string) error {
	d := NormalizeDomain(domain)
	if d == "" {
		return Errorf(EINVALID, "domain %q is invalid", domain)
	}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO domain_blocks (domain, reason, created_at) VALUES (?, ?, ?)
			ON CONFLICT (domain) DO UPDATE SET reason = excluded.reason`, d, reason, ms(s.clock()))
		return err
	})
	if err == nil {
		s.domainBlocksChanged()
	}
	return wrap("add domain block", err)
}

// RemoveDomainBlock unblocks domain; an unknown domain is ENOTFOUND.
func (s *Store) RemoveDomainBlock(ctx context.Context, domain string) error {
	d := NormalizeDomain(domain)
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM domain_blocks WHERE domain = ?`, d)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return Errorf(ENOTFOUND, "domain %q is not blocked", domain)
		}
		return nil
	})
	if err == nil {
		s.domainBlocksChanged()
	}
	return wrap("remove domain block", err)
}

// OnDomainBlocksChange registers fn to run after a domain block is added or
// removed through this store (after the commit), so caches of block
// decisions can drop what they hold. Changes made by another process are
// not seen here: such caches must also expire. fn must not block.
func (s *Store) OnDomainBlocksChange(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.domainChanged = append(s.domainChanged, fn)
}

func (s *Store) domainBlocksChanged() {
	s.mu.Lock()
	fns := s.domainChanged
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// DomainBlocks lists the blocked domains, sorted.
func (s *Store) DomainBlocks(ctx context.Context) ([]DomainBlock, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT domain, reason, created_at FROM domain_blocks ORDER BY domain`)
	if err != nil {
		return nil, wrap("domain blocks", err)
	}
	defer rows.Close()
	var out []DomainBlock
	for rows.Next() {
		var b DomainBlock
		var created int64
		if err := rows.Scan(&b.Domain, &b.Reason, &created); err != nil {
			return nil, wrap("domain blocks", err)
		}
		b.CreatedAt = fromMS(created)
		out = append(out, b)
	}
	return out, wrap("domain blocks", rows.Err())
}

// IsDomainBlocked reports whether host (a host name, host:port or URL) is
// a blocked domain or a subdomain of one. It asks through a
// DomainBlockChecker the store prepares on first use.
func (s *Store) IsDomainBlocked(ctx context.Context, host string) (bool, error) {
	h := NormalizeDomain(host)
	if h == "" {
		return false, nil
	}
	c, err := s.domainChecker(ctx)
	if err != nil {
		return false, err
	}
	return c.blocked(ctx, h)
}

// domainChecker returns the store's DomainBlockChecker, preparing it on
// the first call; a failed preparation is tried again on the next call.
func (s *Store) domainChecker(ctx context.Context) (*DomainBlockChecker, error) {
	s.checkerMu.Lock()
	defer s.checkerMu.Unlock()
	if s.checker == nil {
		c, err := s.NewDomainBlockChecker(ctx)
		if err != nil {
			return nil, err
		}
		s.checker = c
	}
	return s.checker, nil
}

func (s *Store) domainBlockSet(ctx context.Context) (map[string]bool, error) {
	bs, err := s.DomainBlocks(ctx)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(bs))
	for _, b := range bs {
		set[b.Domain] = true
	}
	return set, nil
}

func domainBlocked(set map[string]bool, host string) bool {
	if len(set) == 0 {
		return false
	}
	for _, d := range domainSuffixes(host) {
		if set[d] {
			return true
		}
	}
	return false
}

// domainSuffixes returns host and each of its parent domains, longest
// first: a.b.example.com, b.example.com, example.com, com. It returns none
// for an empty host.
func domainSuffixes(host string) []string {
	var out []string
	for d := host; d != ""; {
		out = append(out, d)
		_, rest, ok := strings.Cut(d, ".")
		if !ok {
			break
		}
		d = rest
	}
	return out
}

// Page limits.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

func clampLimit(n int) int {
	if n <= 0 {
		return DefaultPageSize
	}
	return min(n, MaxPageSize)
}

// GiveUpFollow removes the local follow that the Follow followID asked
// while it is still pending, once the Follow's delivery was given up for
// good (no inbox to deliver it to, or dead-lettered): the actor may send a
// new Follow. It reports whether a follow was removed; an answered follow,
// or an id that is no Follow, is left alone.
func (s *Store) GiveUpFollow(ctx context.Context, followID string) (bool, error) {
	// Read first: a dead delivery of anything but a Follow (most of them)
	// costs no write.
	var typ string
	err := s.db.Read.QueryRowContext(ctx, `SELECT type FROM activities WHERE uri = ?`, followID).Scan(&typ)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && typ != "Follow") {
		return false, nil
	}
	if err != nil {
		return false, wrap("give up follow", err)
	}
	var n int64
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM following WHERE follow_activity_id = ? AND state = 'pending'`, followID)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return false, wrap("give up follow", err)
	}
	return n > 0, nil
}
