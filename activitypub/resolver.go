package activitypub

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"
)

// ActorStore is the persistent cache of remote actors a Resolver uses (the
// store package implements it over remote_actors).
type ActorStore interface {
	// GetRemoteActor returns the stored actor with this id and when it was
	// fetched. It returns a nil actor and a nil error (or an error matching
	// ErrNotFound) when there is none.
	GetRemoteActor(ctx context.Context, id string) (*Actor, time.Time, error)
	// PutRemoteActor upserts the actor, keyed by a.ID, with the document
	// exactly as fetched.
	PutRemoteActor(ctx context.Context, a *Actor, raw []byte, fetchedAt time.Time) error
}

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	// Fetcher fetches actors and keys. Required.
	Fetcher *Fetcher
	// Store caches actors. Required.
	Store ActorStore
	// TTL is how long a stored actor is used without refetching. Default 24 h.
	TTL time.Duration
	// MinRefresh is the least time between two forced refetches of one key
	// (Key with refresh=true), so unverifiable requests cannot make courier
	// refetch without bound. Default 1 min.
	MinRefresh time.Duration
	// GoneTTL is how long a key whose fetch answered 410 or 404 is
	// answered ErrGone or ErrNotFound without fetching again, so that the
	// Deletes a gone actor sends (one per inbox, each retried) cost one key
	// fetch, not one each. Default 10 min.
	GoneTTL time.Duration
	// FailTTL is how long another key resolution that failed for good (the
	// document does not carry the key, cannot be parsed, names another
	// owner...) is answered with the same error without fetching again, so
	// that requests naming a key nobody serves cost one fetch, not one
	// each. Temporary failures (see Temporary) are not remembered.
	// Default 5 min.
	FailTTL time.Duration
	// KeyJoinWait is how long Key waits for a fetch of the same key that
	// another caller has in flight (a burst of requests signed with one
	// new key shares one fetch) before it gives up with ErrHostBusy.
	// Default 10 s.
	KeyJoinWait time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives warnings about the store and stale fallbacks.
	// Default: discard.
	Logger *slog.Logger
}

func (c ResolverConfig) withDefaults() ResolverConfig {
	if c.TTL <= 0 {
		c.TTL = 24 * time.Hour
	}
	if c.MinRefresh <= 0 {
		c.MinRefresh = time.Minute
	}
	if c.GoneTTL <= 0 {
		c.GoneTTL = 10 * time.Minute
	}
	if c.FailTTL <= 0 {
		c.FailTTL = 5 * time.Minute
	}
	if c.KeyJoinWait <= 0 {
		c.KeyJoinWait = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c ResolverConfig) validate() error {
	if c.Fetcher == nil {
		return errors.New("activitypub: resolver: Fetcher is required")
	}
	if c.Store == nil {
		return errors.New("activitypub: resolver: Store is required")
	}
	return nil
}

// maxRemembered bounds the Resolver's in-memory maps (key owners, refresh
// times); when full they are cleared, which only costs a store lookup.
const maxRemembered = 10000

// Bounds of the actors fetched for a key and held in memory until a
// signature verifies with it (see Verified); when either is reached the
// held actors are dropped, which only costs a refetch.
const (
	maxHeld      = 1000
	maxHeldBytes = 32 << 20
)

// Resolver resolves remote actors and signature keys through a TTL cache
// (ActorStore) in front of a Fetcher. Concurrent requests for the same
// actor or key share one fetch. It is safe for concurrent use.
type Resolver struct {
	cfg ResolverConfig

	mu        sync.Mutex
	keyOwner  map[string]string    // keyID -> actor id
	refreshed map[string]time.Time // keyID -> last forced refetch
	gone      map[string]goneKey   // keyID -> its fetch's failure (410, 404, or for good)
	inflight  map[string]*call
	// held are actors fetched for a key, by id, kept in memory until a
	// signature verifies with one of their keys; heldBytes is the size of
	// their documents.
	held      map[string]heldActor
	heldBytes int
}

// heldActor is an actor fetched for a key and not yet stored.
type heldActor struct {
	actor *Actor
	at    time.Time
}

// call is one in-flight fetch shared by concurrent callers.
type call struct {
	done  chan struct{}
	start time.Time // real time the fetch began
	pub   crypto.PublicKey
	actor *Actor
	err   error
}

// NewResolver returns a Resolver.
func NewResolver(cfg ResolverConfig) (*Resolver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Resolver{
		cfg:       cfg,
		keyOwner:  map[string]string{},
		refreshed: map[string]time.Time{},
		gone:      map[string]goneKey{},
		inflight:  map[string]*call{},
		held:      map[string]heldActor{},
	}, nil
}

// Actor returns the actor with this id: the stored copy when fetched less
// than TTL ago, else a fresh fetch (stored before returning). When a
// refetch fails for a reason other than ErrGone or ErrNotFound and a stale
// copy exists, the stale copy is returned. A gone actor yields ErrGone.
func (r *Resolver) Actor(ctx context.Context, id string) (*Actor, error) {
	cached, fetchedAt := r.load(ctx, id)
	if cached != nil && r.cfg.Now().Sub(fetchedAt) < r.cfg.TTL {
		return cached, nil
	}
	a, err := r.fetchActor(ctx, id)
	if err != nil {
		if cached != nil && !errors.Is(err, ErrGone) && !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
			r.cfg.Logger.InfoContext(ctx, "activitypub: using stale actor", "actor", id, "err", err)
			return cached, nil
		}
		return nil, err
	}
	return a, nil
}

// Object fetches the object id (uncached: an object is fetched once, by the
// import that needs it). See Fetcher.FetchObject.
func (r *Resolver) Object(ctx context.Context, id string) (*Object, error) {
	return r.cfg.Fetcher.FetchObject(ctx, id)
}

// Fetch fetches the document at url (uncached, signed, through the
// Fetcher's guarded client and its limits); see Fetcher.Fetch.
func (r *Resolver) Fetch(ctx context.Context, url string) ([]byte, string, error) {
	return r.cfg.Fetcher.Fetch(ctx, url)
}

// Refresh fetches the actor anew, stores and returns it.
func (r *Resolver) Refresh(ctx context.Context, id string) (*Actor, error) {
	return r.fetchActor(ctx, id)
}

// Key returns the public key with this keyId and the id of the actor that
// owns it. It uses the stored owner when fresh; refresh=true forces a
// refetch (the inbox retries once that way when a signature fails, to
// follow key rotation), at most once per MinRefresh per key. When a
// refetch of an expired entry fails for a reason other than ErrGone or
// ErrNotFound, the stored key is returned; a forced refresh never falls
// back, since the stored key has just failed to verify.
func (r *Resolver) Key(ctx context.Context, keyID string, refresh bool) (crypto.PublicKey, string, error) {
	// Claim the refresh before fetching, so failing refetches (a remote that
	// is down) are bounded too.
	refresh = refresh && r.claimRefresh(keyID)
	var stale crypto.PublicKey
	var staleOwner string
	for _, id := range r.ownerCandidates(keyID) {
		a, fetchedAt := r.load(ctx, id)
		if a == nil {
			continue
		}
		pub, owner, err := KeyOf(a, keyID)
		if err != nil {
			continue
		}
		if !refresh && r.cfg.Now().Sub(fetchedAt) < r.cfg.TTL {
			return pub, owner.ID, nil
		}
		stale, staleOwner = pub, owner.ID
		break
	}
	if err := r.goneErr(keyID); err != nil {
		return nil, "", err
	}
	c := r.do(ctx, "key\x00"+keyID, r.cfg.KeyJoinWait, func() *call {
		pub, a, err := r.cfg.Fetcher.FetchKey(ctx, keyID)
		switch {
		case err == nil:
			// Kept in memory only: a document anyone can make courier fetch
			// by naming it in a signature is stored once a signature
			// verified with it (Verified).
			r.hold(a)
		case errors.Is(err, ErrGone) || errors.Is(err, ErrNotFound):
			r.rememberGone(keyID, err, r.cfg.Now())
		case !Temporary(err) && !errors.Is(err, ErrFetchRefused) && ctx.Err() == nil:
			// Remembered as long as a 404 would be, less what GoneTTL
			// exceeds FailTTL by.
			r.rememberGone(keyID, err, r.cfg.Now().Add(r.cfg.FailTTL-r.cfg.GoneTTL))
		}
		return &call{pub: pub, actor: a, err: err}
	})
	if c.err != nil {
		if stale != nil && !refresh && !errors.Is(c.err, ErrGone) && !errors.Is(c.err, ErrNotFound) && ctx.Err() == nil {
			r.cfg.Logger.InfoContext(ctx, "activitypub: using stale key", "key_id", keyID, "err", c.err)
			return stale, staleOwner, nil
		}
		return nil, "", c.err
	}
	r.remember(keyID, c.actor.ID)
	return c.pub, c.actor.ID, nil
}

func (r *Resolver) fetchActor(ctx context.Context, id string) (*Actor, error) {
	c := r.do(ctx, "actor\x00"+id, joinWait, func() *call {
		a, err := r.cfg.Fetcher.FetchActor(ctx, id)
		if err == nil {
			r.store(ctx, a)
		}
		return &call{actor: a, err: err}
	})
	return c.actor, c.err
}

// joinWait is how long a fetch may have been in flight for a caller to wait
// for it rather than start its own: a remote that takes 25 s to answer then holds the caller that
// fetches, not every import that needs the document (they get ErrHostBusy
// and use what they have, a stored or embedded copy, or come back later).
const joinWait = 2 * time.Second

// do runs fn once for concurrent callers with the same key. A caller whose
// context ends, or finds another's fetch in flight for wait, stops waiting
// (ErrHostBusy); the fetch itself is bounded by the client's timeout and the
// first caller's context.
func (r *Resolver) do(ctx context.Context, key string, wait time.Duration, fn func() *call) *call {
	r.mu.Lock()
	if c, ok := r.inflight[key]; ok {
		r.mu.Unlock()
		t := time.NewTimer(max(wait-time.Since(c.start), 0))
		defer t.Stop()
		select {
		case <-c.done:
			return c
		case <-ctx.Done():
			return &call{err: fmt.Errorf("activitypub: resolve: %w", ctx.Err())}
		case <-t.C:
			return &call{err: fmt.Errorf("activitypub: resolve: %w", &BusyError{Host: hostOf(key), Wait: busyWait,
				Why: fmt.Sprintf("has had the fetch this needs in flight for over %s", wait)})}
		}
	}
	c := &call{done: make(chan struct{}), start: time.Now()}
	r.inflight[key] = c
	r.mu.Unlock()

	res := fn()
	c.pub, c.actor, c.err = res.pub, res.actor, res.err
	r.mu.Lock()
	delete(r.inflight, key)
	r.mu.Unlock()
	close(c.done)
	return c
}

// Verified tells the Resolver that a signature verified with keyID: the
// actor fetched for it, held in memory until now, is stored.
func (r *Resolver) Verified(ctx context.Context, keyID string) {
	r.mu.Lock()
	owner, ok := r.keyOwner[keyID]
	h, held := r.held[owner]
	if ok && held {
		delete(r.held, owner)
		r.heldBytes -= len(h.actor.Raw)
	}
	r.mu.Unlock()
	if ok && held {
		if err := r.cfg.Store.PutRemoteActor(ctx, h.actor, h.actor.Raw, h.at); err != nil {
			r.cfg.Logger.WarnContext(ctx, "activitypub: store remote actor", "actor", h.actor.ID, "err", err)
		}
	}
}

// hold keeps a, fetched for a key, in memory until Verified.
func (r *Resolver) hold(a *Actor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.held[a.ID]; ok {
		r.heldBytes -= len(old.actor.Raw)
	}
	if len(r.held) >= maxHeld || r.heldBytes+len(a.Raw) > maxHeldBytes {
		clear(r.held)
		r.heldBytes = 0
	}
	r.held[a.ID] = heldActor{actor: a, at: r.cfg.Now()}
	r.heldBytes += len(a.Raw)
}

// load returns the actor id as held in memory (fetched for a key, not yet
// verified) or else as stored, treating store errors as a miss (logged).
func (r *Resolver) load(ctx context.Context, id string) (*Actor, time.Time) {
	r.mu.Lock()
	h, ok := r.held[id]
	r.mu.Unlock()
	if ok {
		return h.actor, h.at
	}
	a, at, err := r.cfg.Store.GetRemoteActor(ctx, id)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			r.cfg.Logger.WarnContext(ctx, "activitypub: read remote actor", "actor", id, "err", err)
		}
		return nil, time.Time{}
	}
	return a, at
}

// store writes a fetched actor; a failure is logged, not returned: the
// actor was fetched and is usable, only the cache is behind.
func (r *Resolver) store(ctx context.Context, a *Actor) {
	r.mu.Lock()
	if old, ok := r.held[a.ID]; ok {
		delete(r.held, a.ID)
		r.heldBytes -= len(old.actor.Raw)
	}
	r.mu.Unlock()
	if err := r.cfg.Store.PutRemoteActor(ctx, a, a.Raw, r.cfg.Now()); err != nil {
		r.cfg.Logger.WarnContext(ctx, "activitypub: store remote actor", "actor", a.ID, "err", err)
	}
}

// ownerCandidates lists actor ids that may own keyID: a remembered owner,
// the key id without its fragment ({actor}#main-key), and the parent path
// ({actor}/main-key).
func (r *Resolver) ownerCandidates(keyID string) []string {
	var out []string
	r.mu.Lock()
	if o, ok := r.keyOwner[keyID]; ok {
		out = append(out, o)
	}
	r.mu.Unlock()
	if i := strings.IndexByte(keyID, '#'); i > 0 {
		out = append(out, keyID[:i])
	} else if i := strings.LastIndexByte(keyID, '/'); i > len("https://") {
		out = append(out, keyID[:i])
	}
	return out
}

// claimRefresh reports whether keyID may be refetched now, and if so
// records the refetch.
func (r *Resolver) claimRefresh(keyID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	if last, ok := r.refreshed[keyID]; ok && now.Sub(last) < r.cfg.MinRefresh {
		return false
	}
	if len(r.refreshed) >= maxRemembered {
		clear(r.refreshed)
	}
	r.refreshed[keyID] = now
	return true
}

// goneKey is a key fetch that answered 410 or 404, or failed for good.
type goneKey struct {
	err error
	at  time.Time
}

// goneErr returns the error of keyID's fetch when it answered 410 or 404
// less than GoneTTL ago (or failed for good less than FailTTL ago), else
// nil.
func (r *Resolver) goneErr(keyID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.gone[keyID]
	if !ok {
		return nil
	}
	if r.cfg.Now().Sub(g.at) >= r.cfg.GoneTTL {
		delete(r.gone, keyID)
		return nil
	}
	return g.err
}

// rememberGone records that keyID's fetch failed with err, counting its
// age from at.
func (r *Resolver) rememberGone(keyID string, err error, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.gone) >= maxRemembered {
		clear(r.gone)
	}
	r.gone[keyID] = goneKey{err: err, at: at}
}

// remember records the owner of keyID.
func (r *Resolver) remember(keyID, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keyOwner) >= maxRemembered {
		clear(r.keyOwner)
	}
	r.keyOwner[keyID] = owner
}

// hostOf returns the host of the URL at the end of an in-flight key
// ("key\x00{url}"), "" when it has none.
func hostOf(key string) string {
	if i := strings.IndexByte(key, 0); i >= 0 {
		key = key[i+1:]
	}
	u, err := url.Parse(key)
	if err != nil {
		return ""
	}
	return u.Host
}
