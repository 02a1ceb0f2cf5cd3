package inbox

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

// Resolver resolves signature keys and remote actors; *activitypub.Resolver
// implements it.
type Resolver interface {
	// Key returns the public key keyID and the id of the actor owning it;
	// refresh forces a refetch (rate-limited by the resolver).
	Key(ctx context.Context, keyID string, refresh bool) (crypto.PublicKey, string, error)
	// Actor returns the remote actor id, from its cache or fetched.
	Actor(ctx context.Context, id string) (*activitypub.Actor, error)
}

// Health receives signs of life of remote hosts: each verified request
// counts as one for its sender's host, so delivery can release what it
// parked for a host it thought down.
type Health interface {
	SignOfLife(ctx context.Context, host string)
}

// HealthFunc adapts a function to Health.
type HealthFunc func(ctx context.Context, host string)

// SignOfLife calls f.
func (f HealthFunc) SignOfLife(ctx context.Context, host string) { f(ctx, host) }

// Config configures the Handler and the Importer. Fields the Importer does
// not use are ignored by NewImporter.
type Config struct {
	// DB is the database; required. Accepted activities and their events
	// are written through DB.Tx.
	DB *sqldb.DB
	// Store is the repository of local actors and social tables; required.
	Store *store.Store
	// Resolver resolves keys and actors; required.
	Resolver Resolver
	// DateWindow is how far a request's Date may lie from now, either way
	// (default 1 h: Mastodon accepts about 1 h ahead and 65 min behind).
	DateWindow time.Duration
	// MaxBody bounds a request body in bytes (default 1 MiB); larger
	// bodies get 413.
	MaxBody int64
	// KeyCacheTTL is how long a resolved key is reused from memory before
	// the Resolver is asked again (default 5 min; negative: no memory cache,
	// every request asks the Resolver).
	KeyCacheTTL time.Duration
	// DomainBlockTTL is how long the decision that a sender's host is or is
	// not on a blocked domain is reused from memory (default 30 s; negative:
	// no memory, every request asks the database). A domain block added or
	// removed through Store ends every decision at once; the TTL bounds how
	// long a change made by another process can go unseen.
	DomainBlockTTL time.Duration
	// SignOfLifeInterval is the least time between two signs of life
	// reported for one host (default 1 min).
	SignOfLifeInterval time.Duration
	// MaxBatch bounds how many accepted activities share one transaction
	// (default 256).
	MaxBatch int
	// Retention is how long an imported activity stays recorded, which is
	// how long a redelivery of it is recognised as a duplicate (default 30
	// days, the ledger's retention). Importer.Run deletes older ones.
	Retention time.Duration
	// SweepInterval is how often Importer.Run applies Retention (default
	// 1 h).
	SweepInterval time.Duration
	// TombstoneLimit bounds the remote tombstones held (default 100,000):
	// each remote object a Delete named leaves one, so that a Create or
	// Update of it arriving later is not stored; beyond the bound the
	// oldest go.
	TombstoneLimit int
	// TombstoneRetention is how long a remote tombstone is kept (default
	// 30 days; Importer.Run sweeps older ones every SweepInterval). A
	// peer's retries of a Create end well before it.
	TombstoneRetention time.Duration
	// FollowersSyncInterval is the window in which a remote server gets at
	// most one followers synchronization (FEP-8fcf; followsync.go)
	// (default 10 min).
	FollowersSyncInterval time.Duration
	// Logger receives the logs (nil discards).
	Logger *slog.Logger
	// Metrics counts inbound requests by result (nil counts nothing).
	Metrics *metrics.Inbox
	// App records each import in the inbox views of the local actors it
	// concerns, in the import's transaction (nil records nothing).
	App *app.Recorder
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Health receives signs of life (nil: none are reported).
	Health Health
	// Schemes learns the hosts that sign with RFC 9421 (nil: none learnt).
	Schemes Schemes
	// HostRequestsPerMinute is each remote host's budget of inbound
	// requests (default 600: 10 a second, all of them at once at most);
	// beyond it, its requests are answered 429 with Retry-After.
	HostRequestsPerMinute float64
	// HostBytesPerMinute is each remote host's budget of inbound body bytes
	// (default 16 MiB), as HostRequestsPerMinute.
	HostBytesPerMinute int64
	// HostBudgetFactors gives hosts (as key ids name them, with a port if
	// any, lower case) a multiple of the default budgets (nil: none).
	HostBudgetFactors map[string]float64
}

// Defaults of Config.
const (
	DefaultDateWindow         = time.Hour
	DefaultMaxBody            = 1 << 20
	DefaultKeyCacheTTL        = 5 * time.Minute
	DefaultDomainBlockTTL     = 30 * time.Second
	DefaultSignOfLifeInterval = time.Minute
	DefaultMaxBatch           = 256
	DefaultRetention          = 30 * 24 * time.Hour
	DefaultSweepInterval      = time.Hour
	DefaultTombstoneLimit     = 100_000
	DefaultTombstoneRetention = 30 * 24 * time.Hour
	DefaultFollowersSync      = 10 * time.Minute
	DefaultHostRequests       = 600
	DefaultHostBytes          = 16 << 20
)

func (c Config) withDefaults() Config {
	if c.DateWindow == 0 {
		c.DateWindow = DefaultDateWindow
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.KeyCacheTTL == 0 {
		c.KeyCacheTTL = DefaultKeyCacheTTL
	}
	if c.DomainBlockTTL == 0 {
		c.DomainBlockTTL = DefaultDomainBlockTTL
	}
	if c.SignOfLifeInterval == 0 {
		c.SignOfLifeInterval = DefaultSignOfLifeInterval
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.TombstoneLimit == 0 {
		c.TombstoneLimit = DefaultTombstoneLimit
	}
	if c.TombstoneRetention == 0 {
		c.TombstoneRetention = DefaultTombstoneRetention
	}
	if c.FollowersSyncInterval == 0 {
		c.FollowersSyncInterval = DefaultFollowersSync
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.HostRequestsPerMinute == 0 {
		c.HostRequestsPerMinute = DefaultHostRequests
	}
	if c.HostBytesPerMinute == 0 {
		c.HostBytesPerMinute = DefaultHostBytes
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.DB == nil:
		return errors.New("inbox: Config.DB is required")
	case c.Store == nil:
		return errors.New("inbox: Config.Store is required")
	case c.Resolver == nil:
		return errors.New("inbox: Config.Resolver is required")
	case c.Store.URIs().Base == "":
		return errors.New("inbox: Config.Store has no base URL")
	case c.DateWindow < time.Minute:
		return fmt.Errorf("inbox: DateWindow must be at least 1m, not %s", c.DateWindow)
	case c.MaxBody < 1<<10:
		return fmt.Errorf("inbox: MaxBody must be at least 1 KiB, not %d", c.MaxBody)
	case c.SignOfLifeInterval < 0:
		return errors.New("inbox: SignOfLifeInterval must not be negative")
	case c.Retention < time.Hour:
		return fmt.Errorf("inbox: Retention must be at least 1h (the Date window is about that), not %s", c.Retention)
	case c.TombstoneLimit < 1:
		return fmt.Errorf("inbox: TombstoneLimit must be positive, not %d", c.TombstoneLimit)
	case c.TombstoneRetention < time.Hour:
		return fmt.Errorf("inbox: TombstoneRetention must be at least 1h, not %s", c.TombstoneRetention)
	case c.FollowersSyncInterval < time.Second:
		return fmt.Errorf("inbox: FollowersSyncInterval must be at least 1s, not %s", c.FollowersSyncInterval)
	case c.SweepInterval < time.Second:
		return fmt.Errorf("inbox: SweepInterval must be at least 1s, not %s", c.SweepInterval)
	case c.MaxBatch < 1:
		return fmt.Errorf("inbox: MaxBatch must be at least 1, not %d", c.MaxBatch)
	case c.HostRequestsPerMinute < 1:
		return fmt.Errorf("inbox: HostRequestsPerMinute must be at least 1, not %g", c.HostRequestsPerMinute)
	case c.HostBytesPerMinute < c.MaxBody:
		return fmt.Errorf("inbox: HostBytesPerMinute must be at least MaxBody (%d), not %d", c.MaxBody, c.HostBytesPerMinute)
	}
	for host, f := range c.HostBudgetFactors {
		if f <= 0 || host == "" || host != strings.ToLower(host) {
			return fmt.Errorf("inbox: HostBudgetFactors: %q=%g: want a lower-case host and a positive factor", host, f)
		}
	}
	return nil
}
