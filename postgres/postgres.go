package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-ap/courier/sqldb"
)

// IsURL reports whether s names a PostgreSQL database rather than a SQLite
// file: a postgres:// or postgresql:// URL.
func IsURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// Options tunes Open. The zero value is the production setting.
type Options struct {
	// MaxConns bounds the pool of this process (default 16). The sum over
	// every process must stay under the server's max_connections (100 by
	// default), or under PgBouncer's pool size.
	MaxConns int
	// ConnectTimeout bounds the first connection (default 10 s).
	ConnectTimeout time.Duration
	// ConnMaxIdle closes connections idle for longer (default 5 min), so a
	// quiet process gives its connections back.
	ConnMaxIdle time.Duration
	// Listen makes the process listen for other processes' announcements
	// of new events (a server or worker; not a one-shot command).
	Listen bool
	// Logger receives the listener's connection losses (nil: discarded).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.ConnMaxIdle <= 0 {
		o.ConnMaxIdle = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ErrURL is returned for a --db value that is not a usable PostgreSQL URL.
var ErrURL = errors.New("postgres: bad database URL")

// Open connects to the database at dsn and checks that it answers. The
// returned pool serves reads and writes alike and is safe for concurrent
// use; its transactions run at READ COMMITTED, PostgreSQL's default, which
// courier's claims (FOR UPDATE SKIP LOCKED) and conditional updates are
// written for. Statements are written with ? placeholders (numbered by the
// driver, Rebind); a transaction that enqueued events announces them on
// Channel. With opts.Listen the process also listens on Channel and wakes
// the DB's OnWrite hooks when another process announces events.
func Open(ctx context.Context, dsn string, opts Options) (*sqldb.DB, error) {
	opts = opts.withDefaults()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrURL, Redact(dsn))
	}
	cfg.ConnectTimeout = opts.ConnectTimeout
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "courier"
	}
	n := &notifier{}
	pool := sql.OpenDB(&connector{inner: stdlib.GetConnector(*cfg), n: n})
	pool.SetMaxOpenConns(opts.MaxConns)
	pool.SetMaxIdleConns(opts.MaxConns)
	pool.SetConnMaxIdleTime(opts.ConnMaxIdle)
	n.send = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = pool.ExecContext(sctx, notifySQL)
	}
	pctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	if err := pool.PingContext(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", Redact(dsn), err)
	}
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	db := sqldb.New(pool, pool, sqldb.Postgres, Redact(dsn), func() error {
		stop()
		<-done
		return pool.Close()
	})
	if opts.Listen {
		go func() {
			defer close(done)
			listen(lctx, cfg, opts.Logger, db.Wake)
		}()
	} else {
		close(done)
	}
	return db, nil
}

// Redact returns dsn without its secrets, for messages and logs: the
// userinfo password and the value of every password or sslpassword query
// parameter (pgx reads both; the key is matched after percent-decoding and
// without regard to case) are replaced by xxxxx, the rest is kept as
// written. A dsn that does not parse as a URL is not repeated at all.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			k, _, _ := strings.Cut(p, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if isSecretParam(k) {
				parts[i] = url.QueryEscape(k) + "=" + redacted
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if u.Fragment != "" {
		// Nothing courier writes uses one; whatever follows a # may be a
		// password cut off a badly quoted URL.
		u.Fragment, u.RawFragment = redacted, ""
	}
	return u.String()
}

const redacted = "xxxxx"

// HasPassword reports whether dsn carries a password Redact would hide: in
// its userinfo or as a password or sslpassword parameter.
func HasPassword(dsn string) bool {
	return IsURL(dsn) && Redact(dsn) != dsn
}

// isSecretParam reports whether the query parameter named k carries a
// secret: password, sslpassword, and to be safe any other key naming one.
func isSecretParam(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	return strings.Contains(k, "password") || strings.Contains(k, "secret")
}
