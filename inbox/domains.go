package inbox

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// maxCachedDomains bounds the domain-block cache; when full it is cleared,
// which costs one query per host.
const maxCachedDomains = 10000

// domainCache remembers, per host, whether the host is on a blocked domain,
// so that the inbox asks the database about a host once rather than on
// every request.
//
// A decision is reused for at most ttl, and never after a domain block was
// added or removed through the store (store.Store.OnDomainBlocksChange calls
// invalidate after the commit), so a block made through this process's admin
// API takes effect at the next request. Only a change made by another
// process can go unseen, for at most ttl. Other writes, which the inbox makes
// with every activity, leave the cache alone.
type domainCache struct {
	check func(ctx context.Context, host string) (bool, error)
	ttl   time.Duration
	now   func() time.Time
	limit int // most decisions kept (maxCachedDomains)

	// gen counts the domain-block changes since the cache was made. A
	// decision carries the gen read before its query: a change committed
	// during or after the query has moved gen on, and the decision is not
	// reused.
	gen atomic.Uint64

	mu sync.Mutex
	m  map[string]domainDecision
}

type domainDecision struct {
	blocked bool
	gen     uint64
	at      time.Time
}

// newDomainCache returns a cache in front of check; ttl <= 0 turns it off
// (every call asks check).
func newDomainCache(check func(context.Context, string) (bool, error), ttl time.Duration, now func() time.Time) *domainCache {
	return &domainCache{check: check, ttl: ttl, now: now, limit: maxCachedDomains, m: map[string]domainDecision{}}
}

// invalidate forgets every decision; New has the store call it after every
// change of domain blocks (store.Store.OnDomainBlocksChange).
func (c *domainCache) invalidate() { c.gen.Add(1) }

// blocked reports whether host is on a blocked domain.
func (c *domainCache) blocked(ctx context.Context, host string) (bool, error) {
	if c.ttl <= 0 {
		return c.check(ctx, host)
	}
	gen := c.gen.Load()
	now := c.now()
	c.mu.Lock()
	d, ok := c.m[host]
	c.mu.Unlock()
	if ok && d.gen == gen && !now.Before(d.at) && now.Sub(d.at) < c.ttl {
		return d.blocked, nil
	}
	blocked, err := c.check(ctx, host)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	if len(c.m) >= c.limit {
		clear(c.m)
	}
	c.m[host] = domainDecision{blocked: blocked, gen: gen, at: now}
	c.mu.Unlock()
	return blocked, nil
}
