package store

import (
	"context"
	"crypto/rsa"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb"
)

// Store is the repository. It is safe for concurrent use.
type Store struct {
	db   *sqldb.DB
	uris URIs
	now  func() time.Time
	// newKey generates an actor's key pair; tests may share one key.
	newKey func() (*rsa.PrivateKey, error)

	mu            sync.Mutex
	domainChanged []func()
	activityHooks []ActivityHook

	checkerMu sync.Mutex
	checker   *DomainBlockChecker // prepared on first IsDomainBlocked
}

// New returns a store over db for the instance at baseURL (its public
// origin, e.g. "https://courier.example"). now is the clock; nil means
// time.Now.
func New(db *sqldb.DB, baseURL string, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{
		db:     db,
		uris:   NewURIs(baseURL),
		now:    now,
		newKey: activitypub.GenerateKey,
	}
}

// URIs returns the URL builder of this instance.
func (s *Store) URIs() URIs { return s.uris }

// DB returns the underlying database.
func (s *Store) DB() *sqldb.DB { return s.db }

// Tx runs fn in one write transaction (sqldb.DB.Tx), for callers that
// combine several ...Tx methods into one atomic change.
func (s *Store) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	return s.db.Tx(ctx, fn)
}

// forUpdate ends a SELECT, inside a write transaction, of rows that the
// transaction goes on to change on the strength of what it read. On
// PostgreSQL, whose write transactions run side by side at READ COMMITTED,
// it locks them: a second transaction reading them waits for the first to
// commit, then reads its outcome (a row deleted or no longer matching is
// not returned). NO KEY UPDATE conflicts with every update and delete of
// the row but not with the inserts of rows that reference it. SQLite has
// no row locks and needs none: its write transactions run one at a time.
func (s *Store) forUpdate() string {
	if s.db.Postgres() {
		return ` FOR NO KEY UPDATE`
	}
	return ``
}

// forShare is forUpdate for a transaction that only adds rows beside the
// ones it read (a reaction to an object): transactions reading the same
// rows for share do not wait for one another, one changing them waits for
// them all (and they for it).
func (s *Store) forShare() string {
	if s.db.Postgres() {
		return ` FOR SHARE`
	}
	return ``
}

// lockActorTx serializes, on PostgreSQL, the transactions that add a
// follow or a block of the local actor actorID (BlocksTx, addBlockTx):
// each locks the actor's row first, so that the check of one (is the
// target blocked?) sees what the other committed. The actor's deletion
// (DeleteActor) updates the row, so a follow waiting on it finds the
// actor deleted (ENOTFOUND) rather than accepting a follower the Delete's
// fan-out has already passed. On SQLite it does nothing: transactions are
// serialized already.
func (s *Store) lockActorTx(ctx context.Context, tx *sql.Tx, actorID int64) error {
	if !s.db.Postgres() {
		return nil
	}
	var id int64
	err := tx.QueryRowContext(ctx, `SELECT id FROM actors WHERE id = ? AND deleted_at IS NULL`+s.forUpdate(), actorID).Scan(&id)
	return wrap("lock actor", notFound(err, ENOTFOUND, "no actor %d", actorID))
}

// lockObjectURITx serializes, on PostgreSQL, the transactions about a
// remote object that may have no row to lock yet: a local reaction to an
// object courier has not stored (react) and the object's Delete
// (TombstoneTx), which makes its tombstone row. Each takes a
// transaction-scoped advisory lock on the URI (class 15 of the two-key
// space, apart from the migrations' one-key lock), so the Delete either
// finds the reaction committed and removes it, or commits first and the
// reaction, reading the object again after the lock, finds the tombstone.
// Two URIs may share a lock (a hash), which only makes one wait. On SQLite
// it does nothing: transactions are serialized already.
func (s *Store) lockObjectURITx(ctx context.Context, tx *sql.Tx, uri string) error {
	if !s.db.Postgres() {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(15, hashtext(?))`, uri)
	return wrap("lock object", err)
}

// clock returns now truncated to the millisecond, the precision of every
// stored time, so that a value read back equals the value written.
func (s *Store) clock() time.Time {
	return s.now().UTC().Truncate(time.Millisecond)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}

func nullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func marshalList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v) // a []string always marshals
	return string(b)
}

func unmarshalList(s string) []string {
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil
	}
	return v
}

// queryer is what both *sql.DB and *sql.Tx offer for reads.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func notFound(err error, code Code, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return Errorf(code, format, args...)
	}
	return err
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return fmt.Errorf("store: %s: %w", op, err)
}
