package inbox

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// maxCachedKeys bounds the in-memory key cache; when full it is cleared,
// which costs only a lookup in the Resolver's own cache.
const maxCachedKeys = 10000

// keyCache keeps resolved keys in memory for a short while, in front of the
// Resolver (whose cache is a database row and a JSON document to parse).
type keyCache struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[string]cachedKey
}

type cachedKey struct {
	pub   crypto.PublicKey
	owner string
	at    time.Time
}

func newKeyCache(ttl time.Duration, now func() time.Time) *keyCache {
	return &keyCache{ttl: ttl, now: now, m: map[string]cachedKey{}}
}

func (c *keyCache) get(keyID string) (cachedKey, bool) {
	if c.ttl <= 0 {
		return cachedKey{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[keyID]
	if !ok || c.now().Sub(k.at) >= c.ttl {
		return cachedKey{}, false
	}
	return k, true
}

func (c *keyCache) put(keyID string, k cachedKey) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedKeys {
		clear(c.m)
	}
	k.at = c.now()
	c.m[keyID] = k
}

// key resolves keyID: from memory unless refresh, else through the
// Resolver (refresh=true asks it to refetch). Each fetch the Resolver makes
// for it, and the bytes it reads, are charged to the budget of the key's
// host before the signature is checked: a fetch is refused (429) once that
// budget is spent, so that signatures naming ever new keys cannot make
// courier fetch without bound.
func (h *Handler) key(ctx context.Context, keyID string, refresh bool) (cachedKey, error) {
	if !refresh {
		if k, ok := h.keys.get(keyID); ok {
			return k, nil
		}
	}
	host := keyHost(keyID)
	ctx = activitypub.WithFetchHook(ctx, activitypub.FetchHook{
		Before: func(string) error { return h.budgets.spendFetch(ctx, host) },
		After:  func(_ string, n int) { h.budgets.chargeFetched(host, n) },
	})
	pub, owner, err := h.cfg.Resolver.Key(ctx, keyID, refresh)
	if err != nil {
		if activitypub.Temporary(err) && ctx.Err() == nil {
			return cachedKey{}, deferFetch(keyID, err)
		}
		return cachedKey{}, fmt.Errorf("%w: %s: %w", ErrUnknownKey, keyID, err)
	}
	k := cachedKey{pub: pub, owner: owner}
	h.keys.put(keyID, k)
	return k, nil
}

// authenticate verifies r's signature over body and returns the key's
// owner. When the signature fails against a key that may be stale, the key
// is refetched once (the remote may have rotated it) and the signature
// checked again.
func (h *Handler) authenticate(ctx context.Context, r *http.Request, body []byte, sig *activitypub.SignatureParams, act *activitypub.Activity) (string, error) {
	keyID := sig.KeyID
	k, err := h.key(ctx, keyID, false)
	if err != nil {
		if isActorDelete(act) && (errors.Is(err, activitypub.ErrGone) || errors.Is(err, activitypub.ErrNotFound)) {
			return h.authenticateGone(ctx, r, body, sig, act, err)
		}
		return "", err
	}
	err = activitypub.VerifySignature(r, sig, body, k.pub, h.verify)
	if errors.Is(err, activitypub.ErrBadSignature) {
		fresh, ferr := h.key(ctx, keyID, true)
		if ferr != nil {
			h.log.DebugContext(ctx, "inbox: key refetch after a failed signature", "key_id", keyID, "err", ferr)
			if d := deferral(ferr); d != nil {
				return "", d // the key may have rotated: not a verdict yet
			}
			return "", err
		}
		if fresh.pub != nil && !samePublicKey(fresh.pub, k.pub) {
			k, err = fresh, activitypub.VerifySignature(r, sig, body, fresh.pub, h.verify)
		}
	}
	if err != nil {
		return "", err
	}
	if v, ok := h.cfg.Resolver.(interface {
		Verified(ctx context.Context, keyID string)
	}); ok {
		v.Verified(ctx, keyID) // the actor fetched for the key may now be stored
	}
	return k.owner, nil
}

// authenticateGone verifies the Delete of a gone actor (its key fetch
// answered 410 or 404) against the key courier cached for that actor. With
// no cached key it returns errDropDelete: the request is answered 202 and
// dropped, since courier holds nothing of an actor it never resolved.
func (h *Handler) authenticateGone(ctx context.Context, r *http.Request, body []byte, sig *activitypub.SignatureParams, act *activitypub.Activity, fetchErr error) (string, error) {
	keyID := sig.KeyID
	a, _, err := h.st.GetRemoteActor(ctx, act.Actor)
	if err != nil || a == nil {
		return "", errDropDelete
	}
	pub, _, err := activitypub.KeyOf(a, keyID)
	if err != nil {
		return "", errDropDelete
	}
	if err := activitypub.VerifySignature(r, sig, body, pub, h.verify); err != nil {
		return "", err
	}
	h.log.DebugContext(ctx, "inbox: Delete of a gone actor verified with its cached key", "actor", a.ID,
		"key_id", keyID, "err", fetchErr)
	return a.ID, nil
}

// errDropDelete marks an unverifiable Delete of a gone actor: 202, dropped.
var errDropDelete = errors.New("inbox: Delete of a gone actor without a cached key")

// samePublicKey reports whether two public keys are equal.
func samePublicKey(a, b crypto.PublicKey) bool {
	if e, ok := a.(interface{ Equal(crypto.PublicKey) bool }); ok {
		return e.Equal(b)
	}
	return false
}
