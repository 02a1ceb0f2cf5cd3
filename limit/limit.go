// Package limit holds token buckets by key (a client address, a remote
// host), bounded in memory, with an injected clock. courier uses it to
// throttle failed bearer-token attempts per client address and to budget
// inbound requests and bytes per remote host.
package limit

import (
	"math"
	"sync"
	"time"
)

// Config configures a Keyed set of buckets. The zero value of each optional
// field means its documented default.
type Config struct {
	// Rate is how many tokens a bucket regains per second; required.
	Rate float64
	// Burst is a bucket's capacity, which a new bucket starts with;
	// required.
	Burst float64
	// MaxKeys bounds how many buckets are held (default 10000). When full,
	// buckets that have refilled are dropped (a full bucket is the same as
	// none), else one bucket is dropped to make room.
	MaxKeys int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultMaxKeys is the default of Config.MaxKeys.
const DefaultMaxKeys = 10000

// Keyed is a set of token buckets, one per key. It is safe for concurrent use.
type Keyed struct {
	cfg Config

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64 // may be negative: a debt that delays the next refill
	at     time.Time
}

// New returns the buckets of cfg. It panics when Rate or Burst is not
// positive, a programming error.
func New(cfg Config) *Keyed {
	if cfg.Rate <= 0 || cfg.Burst <= 0 || math.IsInf(cfg.Rate, 0) || math.IsInf(cfg.Burst, 0) {
		panic("limit: Rate and Burst must be positive and finite")
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Keyed{cfg: cfg, buckets: map[string]*bucket{}}
}

// refill brings b up to now; the caller holds k.mu.
func (k *Keyed) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(k.cfg.Burst, b.tokens+d.Seconds()*k.cfg.Rate)
		b.at = now
	}
}

// Wait returns how long until key's bucket holds at least one token: 0
// when it does now. It takes nothing.
func (k *Keyed) Wait(key string) time.Duration {
	now := k.cfg.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		return 0
	}
	k.refill(b, now)
	return k.until(b, 1)
}

// until is how long b needs to hold n tokens; the caller holds k.mu.
func (k *Keyed) until(b *bucket, n float64) time.Duration {
	if b.tokens >= n {
		return 0
	}
	return time.Duration(math.Ceil((n - b.tokens) / k.cfg.Rate * float64(time.Second)))
}

// Take takes n tokens from key's bucket when it holds them and reports
// true; otherwise it takes nothing and returns how long until it would
// hold them (n above Burst never fits: the wait is then the time to refill
// completely).
func (k *Keyed) Take(key string, n float64) (bool, time.Duration) {
	now := k.cfg.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.bucketOf(key, now)
	k.refill(b, now)
	if need := math.Min(n, k.cfg.Burst); b.tokens < need {
		return false, k.until(b, need)
	}
	b.tokens -= n
	return true, 0
}

// Charge takes n tokens from key's bucket whether or not it holds them:
// what was already spent (a failed attempt, bytes read) is paid for, down
// to a debt of one Burst at most.
func (k *Keyed) Charge(key string, n float64) {
	now := k.cfg.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.bucketOf(key, now)
	k.refill(b, now)
	b.tokens = math.Max(-k.cfg.Burst, b.tokens-n)
}

// Len returns how many buckets are held.
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}

// bucketOf returns key's bucket, made full when new; the caller holds k.mu.
func (k *Keyed) bucketOf(key string, now time.Time) *bucket {
	if b, ok := k.buckets[key]; ok {
		return b
	}
	if len(k.buckets) >= k.cfg.MaxKeys {
		k.evict(now)
	}
	b := &bucket{tokens: k.cfg.Burst, at: now}
	k.buckets[key] = b
	return b
}

// evict drops every bucket that has refilled, or one bucket when none
// has; the caller holds k.mu.
func (k *Keyed) evict(now time.Time) {
	for key, b := range k.buckets {
		k.refill(b, now)
		if b.tokens >= k.cfg.Burst {
			delete(k.buckets, key)
		}
	}
	if len(k.buckets) < k.cfg.MaxKeys {
		return
	}
	for key := range k.buckets {
		delete(k.buckets, key)
		return
	}
}
