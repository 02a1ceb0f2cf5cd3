package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/store"
)

// Kinds of notification an Item may carry (Item.Kind); the empty kind is an
// item that only fills the actor's timeline.
const (
	KindMention       = "mention"        // a Create whose object mentions the actor
	KindReply         = "reply"          // a Create whose object replies to the actor's object
	KindDirect        = "direct"         // a Create addressed to the actor, neither public nor to followers
	KindFollow        = "follow"         // a Follow of the actor, accepted
	KindFollowRequest = "follow_request" // a Follow of the actor awaiting its approval
	KindLike          = "like"           // a Like of the actor's object
	KindAnnounce      = "announce"       // an Announce (boost) of the actor's object
	KindReaction      = "reaction"       // an EmojiReact (or a Like with content) of the actor's object
	KindMove          = "move"           // a Move of an actor the actor follows
	// Quote consent (FEP-044f).
	KindQuoteRequest    = "quote_request"    // a QuoteRequest of the actor's object awaiting its approval
	KindQuote           = "quote"            // a quote of the actor's object, approved (by policy, or a verified stamp)
	KindQuoteUnapproved = "quote_unapproved" // a quote of the actor's object without a valid approval
	KindQuoteApproved   = "quote_approved"   // an Accept of the actor's QuoteRequest: its quote is authorized
	KindQuoteRejected   = "quote_rejected"   // a Reject of the actor's QuoteRequest: its quote stays unapproved
	KindQuoteRevoked    = "quote_revoked"    // a Delete of the stamp of the actor's quote: its approval withdrawn
)

// Recorder appends items to local actors' inbox views in the caller's
// transaction and runs the registered hooks there. It is safe for
// concurrent use; hooks are registered before the first RecordTx.
type Recorder struct {
	db  *sqldb.DB
	st  *store.Store
	now func() time.Time

	mu    sync.RWMutex
	hooks []Hook
}

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// DB is the database; required.
	DB *sqldb.DB
	// Store is the repository of local actors and objects; required to
	// record activities (RecordActivityTx).
	Store *store.Store
	// Now is the clock of items' created_at (default time.Now).
	Now func() time.Time
}

// NewRecorder returns a Recorder for cfg. With a Store, it registers on it
// the hook that appends every activity a local actor writes to the actor's
// outbox view, in the write's transaction (one Recorder per Store).
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.DB == nil {
		return nil, errors.New("app: RecorderConfig.DB is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Recorder{db: cfg.DB, st: cfg.Store, now: cfg.Now}
	if cfg.Store != nil {
		cfg.Store.OnActivityTx(r.recordOutboxTx)
	}
	return r, nil
}

// AddHook registers h to run, in the recording transaction, for every item
// recorded after this call (webhooks enqueue their events so).
func (r *Recorder) AddHook(h Hook) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks = append(r.hooks, h)
}

const (
	// sqlNextSeq takes the actor's next seq. The upsert holds the counter
	// row's lock (PostgreSQL) until the transaction ends, so two
	// transactions recording for one actor run their appends one after
	// the other and commit in seq order; SQLite's transactions are one
	// after another anyway.
	sqlNextSeq = `INSERT INTO app_inbox_counters (actor_id, seq) VALUES (?, 1)
		ON CONFLICT (actor_id) DO UPDATE SET seq = app_inbox_counters.seq + 1
		RETURNING seq`
	// sqlNextOutboxSeq is sqlNextSeq for the outbox view's counters.
	sqlNextOutboxSeq = `INSERT INTO app_outbox_counters (actor_id, seq) VALUES (?, 1)
		ON CONFLICT (actor_id) DO UPDATE SET seq = app_outbox_counters.seq + 1
		RETURNING seq`
	sqlInsertOutboxItem = `INSERT INTO app_outbox_items (actor_id, seq, activity_uri, type, document, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`
	// sqlAppendOutboxPostgres is both in one statement, which needs no
	// answer and so rides with the write's next round trip (sqldb.Deferred);
	// SQLite has no INSERT in a WITH.
	sqlAppendOutboxPostgres = `WITH c AS (INSERT INTO app_outbox_counters (actor_id, seq) VALUES (?, 1)
		ON CONFLICT (actor_id) DO UPDATE SET seq = app_outbox_counters.seq + 1 RETURNING seq)
		INSERT INTO app_outbox_items (actor_id, seq, activity_uri, type, document, created_at)
		SELECT ?, c.seq, ?, ?, ?, ? FROM c`
	sqlRecorded   = `SELECT 1 FROM app_inbox_items WHERE actor_id = ? AND activity_uri = ?`
	sqlGiveBack   = `UPDATE app_inbox_counters SET seq = seq - 1 WHERE actor_id = ?`
	sqlInsertItem = `INSERT INTO app_inbox_items (actor_id, seq, activity_uri, type, kind, document, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`
)

// RecordTx appends items to their actors' inbox views in tx: each gets the
// next Seq of its actor (items are taken in actor order, so that two
// transactions never wait on each other's counters crosswise), and then
// the hooks run on it. An error fails the transaction. The items' Seq are
// set in place. An activity already in an actor's view is not recorded
// again (its item keeps Seq 0, and no hook runs for it): a handler that
// runs twice records once.
func (r *Recorder) RecordTx(ctx context.Context, tx *sql.Tx, items ...Item) error {
	if len(items) == 0 {
		return nil
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case items[a].ActorID < items[b].ActorID:
			return -1
		case items[a].ActorID > items[b].ActorID:
			return 1
		}
		return 0
	})
	r.mu.RLock()
	hooks := r.hooks
	r.mu.RUnlock()
	now := r.now().UnixMilli()
	for _, i := range order {
		it := &items[i]
		if it.ActorID == 0 || it.ActivityURI == "" || it.Type == "" || len(it.Activity) == 0 {
			return fmt.Errorf("app: record: an item needs its actor, activity id, type and document")
		}
		var seq int64
		if err := tx.QueryRowContext(ctx, sqlNextSeq, it.ActorID).Scan(&seq); err != nil {
			return fmt.Errorf("app: record: next seq of actor %d: %w", it.ActorID, err)
		}
		// Under the counter's lock: an item of this activity committed
		// by another transaction is seen here.
		var dup int
		err := tx.QueryRowContext(ctx, sqlRecorded, it.ActorID, it.ActivityURI).Scan(&dup)
		switch {
		case err == nil:
			// Recorded already: give the seq back (the counter's row is
			// ours until the commit, so no one took a later one).
			if _, err := tx.ExecContext(ctx, sqlGiveBack, it.ActorID); err != nil {
				return fmt.Errorf("app: record: %w", err)
			}
			it.Seq = 0
			continue
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("app: record: %w", err)
		}
		it.Seq = seq
		if _, err := tx.ExecContext(ctx, sqldb.Deferred+sqlInsertItem, it.ActorID, it.Seq, it.ActivityURI, it.Type,
			it.Kind, string(it.Activity), now); err != nil {
			return fmt.Errorf("app: record: %w", err)
		}
		for _, h := range hooks {
			if err := h(ctx, tx, *it); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordOutboxTx appends a, an activity a local actor has just written, to
// the actor's outbox view in the write's transaction tx, with the actor's
// next outbox seq (the counter row's lock orders concurrent writes by one
// actor as sqlNextSeq does the inbox's).
func (r *Recorder) recordOutboxTx(ctx context.Context, tx *sql.Tx, a *store.Activity) error {
	if a.ActorID == 0 || a.URI == "" || a.Type == "" || len(a.Document) == 0 {
		return fmt.Errorf("app: record outbox: an activity needs its actor, id, type and document")
	}
	now := r.now().UnixMilli()
	if r.db.Postgres() {
		if _, err := tx.ExecContext(ctx, sqldb.Deferred+sqlAppendOutboxPostgres, a.ActorID, a.ActorID, a.URI, a.Type,
			string(a.Document), now); err != nil {
			return fmt.Errorf("app: record outbox: %w", err)
		}
		return nil
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, sqlNextOutboxSeq, a.ActorID).Scan(&seq); err != nil {
		return fmt.Errorf("app: record outbox: next seq of actor %d: %w", a.ActorID, err)
	}
	if _, err := tx.ExecContext(ctx, sqlInsertOutboxItem, a.ActorID, seq, a.URI, a.Type,
		string(a.Document), now); err != nil {
		return fmt.Errorf("app: record outbox: %w", err)
	}
	return nil
}
