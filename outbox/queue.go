package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/courier-ap/courier/sqldb"
)

// Sentinel errors of the queue's row operations.
var (
	// ErrNotFound: no outbox row has that id.
	ErrNotFound = errors.New("outbox: not found")
	// ErrState: the row is not in a status that allows the operation (for
	// example retrying a row that is not dead-lettered).
	ErrState = errors.New("outbox: row is not in a status that allows this")
)

// maxErrorLen bounds the last_error stored on a row.
const maxErrorLen = 2000

// Row is one outbox row as the queue sees it.
type Row struct {
	// ID is the row's primary key.
	ID int64
	// Event is the row's event; Event.ID is empty for a row from a foreign
	// writer that has no event id (no ledger dedup for it).
	Event         Event
	Status        string
	Attempts      int // attempts spent (failed deliveries)
	NextAttemptAt time.Time
	// ClaimedAt is when the row was claimed (zero when it is not); it is the
	// claim's owner token: settling a row requires the same value, so a
	// claimer whose lease expired cannot overwrite a newer claim's outcome.
	ClaimedAt time.Time
	LastError string
	// Republished counts the times a deferred event was handed back to the
	// outbox by the JetStream consumer (HandBack); the relay gives each
	// publish after a hand-back a message id of its own, so the broker's
	// duplicate window does not drop it.
	Republished int
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Attempt is the 1-based number of the delivery this claimed row is on.
func (r Row) Attempt() int { return r.Attempts + 1 }

// QueueOptions configures a Queue.
type QueueOptions struct {
	// Read is a pool for the queries of List, Get, Ledger and Stats (default:
	// the writer). sqldb.DB.Read is the right one.
	Read *sql.DB
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Queue is the row-level API of the outbox table event_queue: claiming due
// rows with a lease and settling them (the relay of the JetStream bus and the
// db worker), and what operators need (list, get, retry, discard, release).
type Queue struct {
	write *sql.DB
	read  *sql.DB
	now   func() time.Time
	sql   *dialectSQL // the statements of the store's dialect
	tok   *tokenClock
	cache *stmtCache // the claim and settle statements, prepared once
	// rcache holds Load's statement, prepared on the read pool.
	rcache *stmtCache
	// prepared is set once every hot statement is in cache.
	prepared atomic.Bool
}

// NewQueue returns a Queue over the writer db, sqldb.DB.Write (on SQLite its
// transactions must begin with a write lock, as sqldb.DB.Write's do). Its
// statements (the claim's, the sweep's) are those of the store the pool
// belongs to (sqldb.DialectOf): on PostgreSQL any number of queues, in any
// number of processes, claim disjoint rows (FOR UPDATE SKIP LOCKED).
func NewQueue(db *sql.DB, opts QueueOptions) *Queue {
	q := &Queue{write: db, read: opts.Read, now: opts.Now, sql: sqlOf(sqldb.DialectOf(db)), tok: &tokenClock{},
		cache: newStmtCache(db)}
	if q.read == nil {
		q.read = db
	}
	q.rcache = newStmtCache(q.read)
	if q.now == nil {
		q.now = time.Now
	}
	return q
}

// payloadColumn reads a row's payload from the row, or from event_payloads
// when Enqueue put it there (an empty payload column; see InlinePayload).
const payloadColumn = `CASE WHEN payload = '' THEN
	COALESCE((SELECT p.payload FROM event_payloads p WHERE p.id = event_queue.id), '') ELSE payload END`

const rowColumns = `id, event_id, type, target, ` + payloadColumn + `, status, attempts, next_attempt_at,
	claimed_at, last_error, occurred_at, created_at, updated_at, republished, lane`

const (
	sqlRowDone = `UPDATE event_queue SET status = 'done', claimed_at = NULL, updated_at = ?
		WHERE id = ? AND status = 'processing' AND claimed_at = ?`
	sqlRowFail = `UPDATE event_queue SET status = 'pending', attempts = attempts + 1, next_attempt_at = ?,
		last_error = ?, claimed_at = NULL, updated_at = ?
		WHERE id = ? AND status = 'processing' AND claimed_at = ?`
	sqlRowDefer = `UPDATE event_queue SET status = 'pending', next_attempt_at = ?, claimed_at = NULL, updated_at = ?
		WHERE id = ? AND status = 'processing' AND claimed_at = ?`
	sqlRowDead = `UPDATE event_queue SET status = 'dead_lettered', attempts = attempts + ?, last_error = ?,
		claimed_at = NULL, updated_at = ?
		WHERE id = ? AND status = 'processing' AND claimed_at = ?`
)

// maxIDs bounds the ids one statement lists (well below SQLite's and
// PostgreSQL's limits on bound parameters).
const maxIDs = 512

// idWidth is the number of ids a statement for n ids lists: the next power
// of two, so a handful of statements serve every batch and stay prepared;
// the extra places repeat the last id, which changes nothing.
func idWidth(n int) int {
	w := 1
	for w < n {
		w *= 2
	}
	return min(w, maxIDs)
}

// Statements over a list of ids, by width: claiming rows read by a claim,
// and completing rows of one claim (a batch shares its claim's owner token,
// so one statement completes it).
var (
	sqlRowsClaim = idStatements(sqlClaimPrefix + `id IN (`)
	sqlRowsDone  = idStatements(sqlDonePrefix + `id IN (`)
)

// The same statements over a range of ids, for a list of consecutive ids
// (the common case: rows enqueued together fall due together): a range is
// one scan of the table, a list one lookup per id.
const (
	sqlClaimPrefix = `UPDATE event_queue SET status = 'processing', claimed_at = ?, updated_at = ?
		WHERE status IN ('pending', 'processing') AND `
	sqlDonePrefix = `UPDATE event_queue SET status = 'done', claimed_at = NULL, updated_at = ?
		WHERE status = 'processing' AND claimed_at = ? AND `
	sqlRangeClaim = sqlClaimPrefix + `id BETWEEN ? AND ?`
	// The unary + keeps SQLite's planner on the range: the index of
	// claimed rows would look each row up. PostgreSQL has no unary + on
	// text; its planner weighs the range by its statistics.
	sqlRangeDone = `UPDATE event_queue SET status = 'done', claimed_at = NULL, updated_at = ?
		WHERE +status = 'processing' AND +claimed_at = ? AND id BETWEEN ? AND ?`
	sqlRangeDonePostgres = sqlDonePrefix + `id BETWEEN ? AND ?`
)

// idStatements returns prefix completed by a list of w placeholders, for
// every width w.
func idStatements(prefix string) map[int]string {
	m := make(map[int]string)
	for w := 1; w <= maxIDs; w *= 2 {
		var b strings.Builder
		b.Grow(len(prefix) + 2*w)
		b.WriteString(prefix)
		for i := range w {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
		}
		b.WriteByte(')')
		m[w] = b.String()
	}
	return m
}

// consecutive reports whether ids, in any order, are every id from their
// least to their greatest once, and returns those bounds.
func consecutive(ids []int64) (lo, hi int64, ok bool) {
	if len(ids) == 0 {
		return 0, 0, false
	}
	lo, hi = ids[0], ids[0]
	for _, id := range ids[1:] {
		lo, hi = min(lo, id), max(hi, id)
	}
	if hi-lo+1 != int64(len(ids)) {
		return 0, 0, false
	}
	// As many ids as the range holds: consecutive unless one repeats.
	seen := make([]uint64, (len(ids)+63)/64)
	for _, id := range ids {
		k := id - lo
		if seen[k/64]&(1<<(k%64)) != 0 {
			return 0, 0, false
		}
		seen[k/64] |= 1 << (k % 64)
	}
	return lo, hi, true
}

// execIDs runs the statement of byWidth for ids, maxIDs at a time, with args
// before the ids, and returns the number of rows changed. When ids are
// consecutive it runs rangeQuery (args, then the least and greatest id)
// instead.
func execIDs(s *stmts, byWidth map[int]string, rangeQuery string, args []any, ids []int64) (int64, error) {
	if lo, hi, ok := consecutive(ids); ok && len(ids) > 1 {
		return s.exec(rangeQuery, append(append(make([]any, 0, len(args)+2), args...), lo, hi)...)
	}
	var n int64
	buf := make([]any, 0, len(args)+min(len(ids), maxIDs))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxIDs)]
		ids = ids[len(chunk):]
		w := idWidth(len(chunk))
		buf = append(buf[:0], args...)
		for i := range w {
			buf = append(buf, chunk[min(i, len(chunk)-1)])
		}
		k, err := s.exec(byWidth[w], buf...)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// dialectSQL holds the statements of the queue whose dialects differ; each
// is declared beside its twin (sqlSelectDueIDs and sqlSelectDueIDsPostgres,
// and so on).
type dialectSQL struct {
	selectStale, selectDue, selectDueBulk string
	rangeDone, loadRange                  string
	sweepLedger                           string
	// claimIDs and claimRows claim in one statement, returning the ids
	// and due times (claimIDs) or the rows (claimRows) in claim order;
	// empty on SQLite, which claims with the selections above and an
	// update (sqlPostgresClaim).
	claimIDs, claimRows string
	// oldestDue is OldestPendingDue's query.
	oldestDue string
	// literalStatus writes a Filter's status into its statement
	// (Filter.whereOf): PostgreSQL keeps the open rows of each status in
	// a partial index of that status (migration 0017), which a generic
	// plan of "status = $1" cannot read; SQLite's index of open rows is
	// named by the condition status <> 'done' alone.
	literalStatus bool
	// foldCounts folds the outbox counts of ended PostgreSQL backends
	// (migration 0016); empty on SQLite, whose counts have one shard.
	foldCounts string
	// hot are the statements of claiming and settling, which the queue
	// keeps prepared.
	hot []string
}

var (
	sqliteSQL = newDialectSQL(sqlSelectStaleIDs, sqlSelectDueIDs, sqlSelectDueBulkIDs, sqlRangeDone, sqlLoadRange,
		sqlSweepLedger, "", sqlOldestDue)
	postgresSQL = func() *dialectSQL {
		d := newDialectSQL(sqlSelectStaleIDsPostgres, sqlSelectDueIDsPostgres, sqlSelectDueBulkIDsPostgres,
			sqlRangeDonePostgres, sqlLoadRangePostgres, sqlSweepLedgerPostgres, sqlFoldCountsPostgres, sqlOldestDuePostgres)
		d.claimIDs, d.claimRows = sqlPostgresClaim(sqlClaimedIDs), sqlPostgresClaim(sqlClaimedRows)
		d.literalStatus = true
		d.hot = append(d.hot, d.claimIDs, d.claimRows)
		return d
	}()
)

func newDialectSQL(stale, due, bulk, rangeDone, loadRange, sweepLedger, fold, oldestDue string) *dialectSQL {
	d := &dialectSQL{selectStale: stale, selectDue: due, selectDueBulk: bulk, rangeDone: rangeDone,
		loadRange: loadRange, sweepLedger: sweepLedger, foldCounts: fold, oldestDue: oldestDue}
	d.hot = []string{stale, due, bulk, loadRange, sqlLoadClaimed, sqlRowDefer, sqlRowDead, sqlRangeClaim, rangeDone}
	for w := 1; w <= maxIDs; w *= 2 {
		d.hot = append(d.hot, sqlRowsClaim[w], sqlRowsDone[w], sqlLedgerDoneMany[w])
	}
	for w := 1; w <= ledgerBatch; w *= 2 {
		d.hot = append(d.hot, sqlLedgerReadMany[w], sqlLedgerInsertMany[w])
	}
	return d
}

// sqlOf returns the statements of dialect d.
func sqlOf(d sqldb.Dialect) *dialectSQL {
	if d == sqldb.Postgres {
		return postgresSQL
	}
	return sqliteSQL
}

// prepare readies the hot statements; it must run outside a transaction.
// Once they are all prepared it costs a lookup.
func (q *Queue) prepare(ctx context.Context) {
	if !q.prepared.Load() {
		q.prepared.Store(q.cache.prepare(ctx, q.sql.hot...))
	}
}

// Claim claims up to limit rows in one write transaction: first rows whose
// claim is older than lease (a claimer that died), then due pending rows,
// oldest first. Claimed rows are 'processing' with ClaimedAt set to the
// claim's owner token. Settle them with Settle (or Complete, Defer, Release).
func (q *Queue) Claim(ctx context.Context, limit int, lease time.Duration) ([]Row, error) {
	q.prepare(ctx)
	var rows []Row
	err := inCachedTx(ctx, q.write, q.cache, func(s *stmts) error {
		now := q.now()
		var err error
		rows, err = claimRows(s, q.sql, q.tok.next(now), now, limit, lease)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	return rows, nil
}

// claimRows claims up to limit rows with owner token token, as claimIDs
// does, and reads them in the claim's transaction.
func claimRows(s *stmts, d *dialectSQL, token int64, now time.Time, limit int, lease time.Duration) ([]Row, error) {
	if d.claimRows != "" {
		if limit <= 0 {
			return nil, nil
		}
		rs, err := s.query(d.claimRows, claimArgs(token, now.UnixMilli(), limit, lease)...)
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var rows []Row
		for rs.Next() {
			r, err := scanClaimed(rs, time.UnixMilli(token))
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
		return rows, rs.Err()
	}
	c, err := claimIDs(s, d, token, now, limit, lease)
	if err != nil || len(c.IDs) == 0 {
		return nil, err
	}
	rows, err := loadClaimed(c, d, s.query)
	if err != nil {
		return nil, err
	}
	if len(rows) != len(c.IDs) {
		return nil, fmt.Errorf("read %d of the %d rows claimed", len(rows), len(c.IDs))
	}
	return rows, nil
}

type scanner interface{ Scan(...any) error }

func scanRow(sc scanner) (Row, error) {
	var (
		r                    Row
		eventID, target, msg sql.NullString
		payload              string
		next, occ, cr, up    int64
		claimed              sql.NullInt64
	)
	if err := sc.Scan(&r.ID, &eventID, &r.Event.Type, &target, &payload, &r.Status, &r.Attempts, &next,
		&claimed, &msg, &occ, &cr, &up, &r.Republished, &r.Event.Lane); err != nil {
		return Row{}, err
	}
	r.Event.ID, r.Event.Target, r.LastError = eventID.String, target.String, msg.String
	r.Event.Payload = []byte(payload)
	r.Event.OccurredAt = time.UnixMilli(occ)
	r.NextAttemptAt = time.UnixMilli(next)
	if claimed.Valid {
		r.ClaimedAt = time.UnixMilli(claimed.Int64)
	}
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(cr), time.UnixMilli(up)
	return r, nil
}

// Claimed is a claim taken by SettleAndClaimIDs: which rows it holds, not
// yet read. Load reads them.
type Claimed struct {
	// Token is the claim's owner token: the ClaimedAt of each of its rows.
	Token time.Time
	// IDs are the claimed rows' ids, in claim order (stale claims first,
	// then the oldest due).
	IDs []int64
	// OldestDue is the earliest NextAttemptAt among the rows (zero when
	// there are none): how long the oldest had waited, without reading
	// the rows.
	OldestDue time.Time
}

// Statements of a claim: the ids to claim and their due times (due rows'
// from their partial index alone), then the rows to read. A claim reads
// ids, marks them, then reads the rows it needs, in one write transaction
// (or, for the relay, the rows on the read pool afterwards): the write lock
// keeps the rows as they were read. That costs less than UPDATE ...
// RETURNING, which buffers every returned row before handing out the first.
//
// On PostgreSQL claimers run side by side (READ COMMITTED), in any number of
// processes: each id selection locks the rows it returns FOR UPDATE and
// skips rows another claim has locked (SKIP LOCKED), so concurrent claims
// read disjoint rows, and the UPDATE that marks them changes exactly the
// rows read. A row settled or released meanwhile by its claimer is re-read
// by the selection at its newest version, so it is not claimed twice.
const (
	sqlSelectStaleIDs = `SELECT id, next_attempt_at FROM event_queue
		WHERE status = 'processing' AND claimed_at <= ? ORDER BY claimed_at LIMIT ?`
	sqlSelectStaleIDsPostgres = sqlSelectStaleIDs + ` FOR UPDATE SKIP LOCKED`
	// Due rows, per lane (see lane.go): lane 0 through its own index, the
	// others through event_queue_due (named for SQLite's planner).
	sqlSelectDueIDs = `SELECT id, next_attempt_at FROM event_queue
		WHERE status = 'pending' AND lane = 0 AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?`
	sqlSelectDueIDsPostgres = sqlSelectDueIDs + ` FOR UPDATE SKIP LOCKED`
	sqlSelectDueBulkIDs     = `SELECT id, next_attempt_at FROM event_queue INDEXED BY event_queue_due
		WHERE status = 'pending' AND next_attempt_at <= ? AND lane <> 0 ORDER BY next_attempt_at, id LIMIT ?`
	sqlSelectDueBulkIDsPostgres = `SELECT id, next_attempt_at FROM event_queue
		WHERE status = 'pending' AND next_attempt_at <= ? AND lane <> 0 ORDER BY next_attempt_at, id LIMIT ?
		FOR UPDATE SKIP LOCKED`
	// sqlLoadClaimed reads the rows of one owner token through the index
	// of claimed rows; Load keeps those of its claim. It reads what a
	// claimer uses (the claim itself set the status, claimed_at and
	// updated_at).
	sqlLoadClaimed = sqlLoadColumns + `WHERE status = 'processing' AND claimed_at = ?`
	// sqlLoadRange reads the rows of one owner token among consecutive ids
	// by scanning the table's range (the unary + keeps the planner off the
	// index of claimed rows, which would look each row up).
	sqlLoadRange         = sqlLoadColumns + `WHERE id BETWEEN ? AND ? AND +status = 'processing' AND +claimed_at = ?`
	sqlLoadRangePostgres = sqlLoadColumns + `WHERE id BETWEEN ? AND ? AND status = 'processing' AND claimed_at = ?`
	sqlLoadColumns       = `SELECT id, COALESCE(event_id, ''), type, COALESCE(target, ''), ` + payloadColumn + `,
		attempts, next_attempt_at, occurred_at, republished, lane FROM event_queue `
)

// sqlPostgresClaim is PostgreSQL's claim in one statement: what
// claimIDs does with three selections and an update, in one round trip and
// one trigger firing. Each selection locks the rows it returns FOR UPDATE
// and skips those another claim has locked, as sqlSelectDueIDsPostgres
// does; the limits chain as claimIDs's do (the stale rows first, then the
// interactive lane, then the bulk lane, which gets what is left and at
// least one in BulkShare of the claim when its rows are due; the
// interactive rows that makes room for stay locked until the statement
// ends, unclaimed). The update marks exactly the rows picked, looked up by
// primary key (= ANY of their array: joined to the picked rows instead, a
// small table's planner would scan it whole), and returning then lists
// them in claim order, with the columns of returning (from the
// updated rows, so a change committed by another transaction before the
// lock is seen). Its arguments: the stale bound, limit twice, now twice,
// the owner token, now.
func sqlPostgresClaim(returning string) string {
	return `WITH stale AS MATERIALIZED (
		SELECT id, claimed_at AS k FROM event_queue
		WHERE status = 'processing' AND claimed_at <= ? ORDER BY claimed_at, id LIMIT ? FOR UPDATE SKIP LOCKED),
	rest AS MATERIALIZED (SELECT GREATEST(? - COUNT(*), 0) AS n FROM stale),
	inter AS MATERIALIZED (
		SELECT id, next_attempt_at FROM event_queue
		WHERE status = 'pending' AND lane = 0 AND next_attempt_at <= ? ORDER BY next_attempt_at, id
		LIMIT (SELECT n FROM rest) FOR UPDATE SKIP LOCKED),
	bulk AS MATERIALIZED (
		SELECT id, next_attempt_at FROM event_queue
		WHERE status = 'pending' AND lane <> 0 AND next_attempt_at <= ? ORDER BY next_attempt_at, id
		LIMIT (SELECT CASE WHEN n = 0 THEN 0
			WHEN (SELECT COUNT(*) FROM inter) = n THEN GREATEST(n / ` + strconv.Itoa(BulkShare) + `, 1)
			ELSE n - (SELECT COUNT(*) FROM inter) END FROM rest)
		FOR UPDATE SKIP LOCKED),
	picked AS MATERIALIZED (
		SELECT id, 0 AS part, k FROM stale
		UNION ALL
		(SELECT id, 1, next_attempt_at FROM inter ORDER BY next_attempt_at, id
			LIMIT (SELECT n FROM rest) - (SELECT COUNT(*) FROM bulk))
		UNION ALL
		SELECT id, 2, next_attempt_at FROM bulk),
	claimed AS (
		UPDATE event_queue SET status = 'processing', claimed_at = ?, updated_at = ?
		WHERE id = ANY (ARRAY(SELECT id FROM picked))
		RETURNING ` + returning + `)
	SELECT claimed.* FROM claimed JOIN picked USING (id) ORDER BY picked.part, picked.k, picked.id`
}

// The columns sqlPostgresClaim returns: a claim's ids and due times, or the
// rows as sqlLoadColumns reads them.
const (
	sqlClaimedIDs  = `event_queue.id AS id, event_queue.next_attempt_at AS next_attempt_at`
	sqlClaimedRows = `event_queue.id AS id, COALESCE(event_queue.event_id, '') AS event_id,
		event_queue.type AS type, COALESCE(event_queue.target, '') AS target,
		CASE WHEN event_queue.payload = '' THEN
			COALESCE((SELECT p.payload FROM event_payloads p WHERE p.id = event_queue.id), '')
			ELSE event_queue.payload END AS payload,
		event_queue.attempts AS attempts, event_queue.next_attempt_at AS next_attempt_at,
		event_queue.occurred_at AS occurred_at, event_queue.republished AS republished, event_queue.lane AS lane`
)

// SettleAndClaimIDs settles, then claims up to limit rows as Claim does, in
// one write transaction (a relay that completes the batch it published and
// claims the next pays for one commit), reading only the claimed rows' ids:
// the writer, which every producer waits for, spends nothing on the rows'
// contents; Load reads them afterwards on the read pool, concurrently with
// the next write. When it fails, nothing was settled or claimed.
func (q *Queue) SettleAndClaimIDs(ctx context.Context, limit int, lease time.Duration, settlements ...Settlement) (Claimed, int, error) {
	var (
		c Claimed
		n int
	)
	q.prepare(ctx)
	err := inCachedTx(ctx, q.write, q.cache, func(s *stmts) error {
		now := q.now()
		var err error
		if n, err = settleRows(s, q.sql, now, settlements); err != nil {
			return err
		}
		if limit > 0 {
			c, err = claimIDs(s, q.sql, q.tok.next(now), now, limit, lease)
		}
		return err
	})
	if err != nil {
		return Claimed{}, 0, fmt.Errorf("outbox: settle and claim: %w", err)
	}
	return c, n, nil
}

// claimIDs claims up to limit rows with owner token token: first rows
// whose claim is older than lease, then due pending rows, oldest first
// within their lane, interactive rows ahead of bulk ones (lane.go). It reads
// only their ids and due times.
func claimIDs(s *stmts, d *dialectSQL, token int64, now time.Time, limit int, lease time.Duration) (Claimed, error) {
	if limit <= 0 {
		return Claimed{}, nil
	}
	nowMs := now.UnixMilli()
	if d.claimIDs != "" {
		return claimInOne(s, d, token, nowMs, limit, lease)
	}
	ids := make([]int64, 0, limit)
	oldest := int64(0)
	add := func(got []idDue) {
		for _, r := range got {
			ids = append(ids, r.id)
			if oldest == 0 || r.due < oldest {
				oldest = r.due
			}
		}
	}
	stale, err := selectIDs(s, d.selectStale, nowMs-lease.Milliseconds(), limit)
	if err != nil {
		return Claimed{}, err
	}
	add(stale)
	if rest := limit - len(ids); rest > 0 {
		// Interactive rows first; bulk rows get what is left, and at least
		// one in BulkShare of the claim when they are due.
		inter, err := selectIDs(s, d.selectDue, nowMs, rest)
		if err != nil {
			return Claimed{}, err
		}
		var bulk []idDue
		if len(inter) == rest {
			if bulk, err = selectIDs(s, d.selectDueBulk, nowMs, max(rest/BulkShare, 1)); err != nil {
				return Claimed{}, err
			}
			inter = inter[:rest-len(bulk)]
		} else if bulk, err = selectIDs(s, d.selectDueBulk, nowMs, rest-len(inter)); err != nil {
			return Claimed{}, err
		}
		add(inter)
		add(bulk)
	}
	if len(ids) == 0 {
		return Claimed{}, nil
	}
	n, err := execIDs(s, sqlRowsClaim, sqlRangeClaim, []any{token, nowMs}, ids)
	if err != nil {
		return Claimed{}, err
	}
	if n != int64(len(ids)) {
		return Claimed{}, fmt.Errorf("claimed %d of the %d rows read", n, len(ids))
	}
	return Claimed{Token: time.UnixMilli(token), IDs: ids, OldestDue: time.UnixMilli(oldest)}, nil
}

// claimInOne claims as claimIDs does with the dialect's one-statement
// claim (d.claimIDs).
func claimInOne(s *stmts, d *dialectSQL, token, nowMs int64, limit int, lease time.Duration) (Claimed, error) {
	rs, err := s.query(d.claimIDs, claimArgs(token, nowMs, limit, lease)...)
	if err != nil {
		return Claimed{}, err
	}
	defer rs.Close()
	c := Claimed{Token: time.UnixMilli(token), IDs: make([]int64, 0, limit)}
	oldest := int64(0)
	for rs.Next() {
		var id, due int64
		if err := rs.Scan(&id, &due); err != nil {
			return Claimed{}, err
		}
		c.IDs = append(c.IDs, id)
		if oldest == 0 || due < oldest {
			oldest = due
		}
	}
	if err := rs.Err(); err != nil {
		return Claimed{}, err
	}
	if len(c.IDs) == 0 {
		return Claimed{}, nil
	}
	c.OldestDue = time.UnixMilli(oldest)
	return c, nil
}

// claimArgs are the arguments of sqlPostgresClaim.
func claimArgs(token, nowMs int64, limit int, lease time.Duration) []any {
	return []any{nowMs - lease.Milliseconds(), limit, limit, nowMs, nowMs, token, nowMs}
}

// idDue is a row id and its due time.
type idDue struct{ id, due int64 }

// selectIDs runs one of the claim's id selections.
func selectIDs(s *stmts, query string, bound int64, limit int) ([]idDue, error) {
	rs, err := s.query(query, bound, limit)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []idDue
	for rs.Next() {
		var r idDue
		if err := rs.Scan(&r.id, &r.due); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// Load reads the rows of claim c from the read pool, in the order of c.IDs.
// A row the claim no longer holds (its lease expired and another claimer
// took it) is left out; settling it would change nothing anyway.
func (q *Queue) Load(ctx context.Context, c Claimed) ([]Row, error) {
	if len(c.IDs) == 0 {
		return nil, nil
	}
	rows, err := loadClaimed(c, q.sql, func(query string, args ...any) (*sql.Rows, error) {
		st := q.rcache.get(query)
		if st == nil {
			q.rcache.prepare(ctx, query)
			if st = q.rcache.get(query); st == nil {
				// Not kept prepared: a one-off query.
				return q.read.QueryContext(ctx, query, args...)
			}
		}
		return st.QueryContext(ctx, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: load claimed rows: %w", err)
	}
	return rows, nil
}

// loadClaimed reads the rows of claim c with run (the read pool's
// statements for Load, the claim's transaction for Claim), in the order of
// c.IDs, leaving out those the claim no longer holds.
func loadClaimed(c Claimed, d *dialectSQL, run func(query string, args ...any) (*sql.Rows, error)) ([]Row, error) {
	// index finds a row's place in c.IDs: by its offset in a range of
	// consecutive ids, else through a map.
	var index func(id int64) (int, bool)
	query, args := sqlLoadClaimed, []any{c.Token.UnixMilli()}
	if lo, hi, ok := consecutive(c.IDs); ok {
		query, args = d.loadRange, []any{lo, hi, c.Token.UnixMilli()}
		at := make([]int, len(c.IDs))
		for i, id := range c.IDs {
			at[id-lo] = i
		}
		index = func(id int64) (int, bool) {
			if id < lo || id > hi {
				return 0, false
			}
			return at[id-lo], true
		}
	} else {
		want := make(map[int64]int, len(c.IDs))
		for i, id := range c.IDs {
			want[id] = i
		}
		index = func(id int64) (int, bool) {
			i, ok := want[id]
			return i, ok
		}
	}
	rs, err := run(query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	found := make([]Row, len(c.IDs))
	n := 0
	for rs.Next() {
		r, err := scanClaimed(rs, c.Token)
		if err != nil {
			return nil, err
		}
		i, ok := index(r.ID)
		if !ok || found[i].ID != 0 {
			continue
		}
		found[i] = r
		n++
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if n == len(found) {
		return found, nil
	}
	out := make([]Row, 0, n)
	for _, r := range found {
		if r.ID != 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// scanClaimed reads a row of claim token as sqlLoadColumns (or
// sqlClaimedRows) lists its columns.
func scanClaimed(rs *sql.Rows, token time.Time) (Row, error) {
	// Plain string and int64 destinations: database/sql converts to them
	// without reflection.
	var (
		r                          Row
		payload                    []byte
		attempts, next, occ, repub int64
	)
	if err := rs.Scan(&r.ID, &r.Event.ID, &r.Event.Type, &r.Event.Target, &payload, &attempts, &next,
		&occ, &repub, &r.Event.Lane); err != nil {
		return Row{}, err
	}
	r.Event.Payload, r.Attempts, r.Republished = payload, int(attempts), int(repub)
	r.Event.OccurredAt, r.NextAttemptAt = time.UnixMilli(occ), time.UnixMilli(next)
	r.Status, r.ClaimedAt = StatusProcessing, token
	return r, nil
}

// Settlement is the outcome to apply to a claimed row.
type Settlement struct {
	// Row is the row as Claim returned it (ID and ClaimedAt identify the
	// claim).
	Row Row
	// Result is the delivery's verdict (Runner.Run). Released puts the row
	// back to pending at Result.Next (now when zero) without spending an
	// attempt; Deferred does the same at Result.Next.
	Result Result
}

// Settle applies settlements to their rows in one write transaction. A row
// whose claim is no longer the one settled (its lease expired and another
// claimer took it) is left alone. It returns how many rows were changed.
// Each row should appear at most once.
func (q *Queue) Settle(ctx context.Context, settlements ...Settlement) (int, error) {
	q.prepare(ctx)
	var n int
	err := inCachedTx(ctx, q.write, q.cache, func(s *stmts) error {
		var err error
		n, err = settleRows(s, q.sql, q.now(), settlements)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: settle: %w", err)
	}
	return n, nil
}

// settleRows applies settlements in order and returns how many rows changed.
// Consecutive successes of one claim are completed by one statement (per
// maxIDs rows); every other outcome is applied row by row.
func settleRows(s *stmts, d *dialectSQL, now time.Time, settlements []Settlement) (int, error) {
	var (
		n     int
		token int64
		ids   []int64 // the pending completion, all of claim token
	)
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		k, err := execIDs(s, sqlRowsDone, d.rangeDone, []any{now.UnixMilli(), token}, ids)
		if err != nil {
			return fmt.Errorf("complete %d rows: %w", len(ids), err)
		}
		n += int(k)
		ids = ids[:0]
		return nil
	}
	for _, st := range settlements {
		if st.Result.Outcome != Succeeded || st.Row.ClaimedAt.IsZero() {
			if err := flush(); err != nil {
				return 0, err
			}
			ok, err := settleRow(s, now, st)
			if err != nil {
				return 0, err
			}
			if ok {
				n++
			}
			continue
		}
		if t := st.Row.ClaimedAt.UnixMilli(); len(ids) == 0 || t != token {
			if err := flush(); err != nil {
				return 0, err
			}
			token = t
		}
		ids = append(ids, st.Row.ID)
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return n, nil
}

// Complete marks claimed rows done.
func (q *Queue) Complete(ctx context.Context, rows ...Row) (int, error) {
	return q.Settle(ctx, SettleAll(rows, Result{Outcome: Succeeded})...)
}

// Defer puts claimed rows back to pending, due at until, without spending an
// attempt (the relay's answer to an unreachable broker).
func (q *Queue) Defer(ctx context.Context, until time.Time, rows ...Row) (int, error) {
	return q.Settle(ctx, SettleAll(rows, Result{Outcome: Deferred, Next: until})...)
}

// Release puts claimed rows back to pending, due now, without spending an
// attempt (shutdown).
func (q *Queue) Release(ctx context.Context, rows ...Row) (int, error) {
	return q.Settle(ctx, SettleAll(rows, Result{Outcome: Released, Next: q.now()})...)
}

// SettleAll returns one settlement per row, each applying res, for Settle
// or SettleAndClaimIDs.
func SettleAll(rows []Row, res Result) []Settlement {
	out := make([]Settlement, len(rows))
	for i, r := range rows {
		out[i] = Settlement{Row: r, Result: res}
	}
	return out
}

// settleRow applies one settlement; it reports whether the row changed.
func settleRow(s *stmts, now time.Time, st Settlement) (bool, error) {
	if st.Row.ClaimedAt.IsZero() {
		return false, fmt.Errorf("row %d: not claimed", st.Row.ID)
	}
	token, nowMs := st.Row.ClaimedAt.UnixMilli(), now.UnixMilli()
	res := st.Result
	var (
		n   int64
		err error
	)
	switch res.Outcome {
	case Succeeded:
		n, err = s.exec(sqlRowDone, nowMs, st.Row.ID, token)
	case Failed:
		next := res.Next
		if next.IsZero() {
			next = now.Add(Backoff(st.Row.Attempt()))
		}
		n, err = s.exec(sqlRowFail, next.UnixMilli(), errText(res.Err), nowMs, st.Row.ID, token)
	case Deferred, Released:
		next := res.Next
		if next.IsZero() {
			next = now
		}
		n, err = s.exec(sqlRowDefer, next.UnixMilli(), nowMs, st.Row.ID, token)
	case Dead:
		n, err = s.exec(sqlRowDead, 1, errText(res.Err), nowMs, st.Row.ID, token)
	default:
		return false, fmt.Errorf("row %d: unknown outcome %d", st.Row.ID, res.Outcome)
	}
	if err != nil {
		return false, fmt.Errorf("row %d: %w", st.Row.ID, err)
	}
	return n == 1, nil
}

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	s := err.Error()
	if len(s) > maxErrorLen {
		s = s[:maxErrorLen]
	}
	return s
}

// Filter selects rows for List and Count. Zero fields do not filter.
type Filter struct {
	Status string
	Type   string
	Target string
	// EventID selects the row of one event.
	EventID string
	// AfterID pages: only rows with a larger id.
	AfterID int64
	// Limit bounds the result (default 100, at most 1000).
	Limit int
}

// where returns f's conditions (Limit aside) as a WHERE clause's body and
// its arguments, as SQLite's planner reads them.
func (f Filter) where() (string, []any) { return f.whereOf(sqliteSQL) }

// whereOf is where for the statements of dialect d: with d.literalStatus a
// known status is written in the statement rather than bound, so that
// every plan of it, generic ones too, may read the partial index of that
// status.
func (f Filter) whereOf(d *dialectSQL) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if f.Status != "" {
		switch f.Status {
		case StatusPending, StatusProcessing, StatusDone, StatusDeadLettered:
			if d.literalStatus {
				where = append(where, "status = '"+f.Status+"'")
				break
			}
			fallthrough
		default:
			add("status = ?", f.Status)
		}
		if f.Status != StatusDone {
			// The condition of the open rows' partial indexes (migration
			// 0014), named so that the planner may use them: a list or
			// count of open rows then never walks the done ones.
			where = append(where, "status <> 'done'")
		}
	}
	if f.Type != "" {
		add("type = ?", f.Type)
	}
	if f.Target != "" {
		add("target = ?", f.Target)
	}
	if f.EventID != "" {
		add("event_id = ?", f.EventID)
	}
	add("id > ?", f.AfterID)
	return strings.Join(where, " AND "), args
}

// List returns rows matching f in id order.
func (q *Queue) List(ctx context.Context, f Filter) ([]Row, error) {
	where, args := f.whereOf(q.sql)
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	args = append(args, limit)
	query := `SELECT ` + rowColumns + ` FROM event_queue WHERE ` + where + ` ORDER BY id LIMIT ?`
	rs, err := q.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		r, err := scanRow(rs)
		if err != nil {
			return nil, fmt.Errorf("outbox: list: %w", err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	return out, nil
}

// Count counts the rows matching f (its Limit aside), counting no further
// than most: a result of most means most or more.
func (q *Queue) Count(ctx context.Context, f Filter, most int64) (int64, error) {
	where, args := f.whereOf(q.sql)
	var n int64
	err := q.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM event_queue WHERE `+where+` LIMIT ?) AS matched`,
		append(args, most)...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("outbox: count: %w", err)
	}
	return n, nil
}

// Get returns the row with primary key id, or ErrNotFound.
func (q *Queue) Get(ctx context.Context, id int64) (Row, error) {
	r, err := scanRow(q.read.QueryRowContext(ctx, `SELECT `+rowColumns+` FROM event_queue WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("outbox: get row %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Row{}, fmt.Errorf("outbox: get row %d: %w", id, err)
	}
	return r, nil
}

// Retry puts a dead-lettered row back to pending, due now, with its attempts
// reset. Its ledger is left as it is: handlers already done stay skipped.
func (q *Queue) Retry(ctx context.Context, id int64) error {
	now := q.now().UnixMilli()
	return q.change(ctx, "retry", id, `UPDATE event_queue SET status = 'pending', attempts = 0,
		next_attempt_at = ?, claimed_at = NULL, updated_at = ? WHERE id = ? AND status = 'dead_lettered'`,
		now, now, id)
}

// Discard deletes a dead-lettered or pending row (never one being
// processed).
func (q *Queue) Discard(ctx context.Context, id int64) error {
	return q.change(ctx, "discard", id,
		`DELETE FROM event_queue WHERE id = ? AND status IN ('dead_lettered', 'pending')`, id)
}

func (q *Queue) change(ctx context.Context, op string, id int64, query string, args ...any) error {
	err := inTx(ctx, q.write, func(s *stmts) error {
		n, err := s.exec(query, args...)
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		var status string
		err = s.tx.QueryRowContext(ctx, `SELECT status FROM event_queue WHERE id = ?`, id).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%w (status %s)", ErrState, status)
	})
	if err != nil {
		return fmt.Errorf("outbox: %s row %d: %w", op, id, err)
	}
	return nil
}

// ReleaseTarget makes every pending row of target due now (rows parked or
// backing off for a host that is known to be back). Attempts are kept. It
// returns how many rows it changed.
func (q *Queue) ReleaseTarget(ctx context.Context, target string) (int64, error) {
	now := q.now().UnixMilli()
	// status <> 'done' names the condition of the host's open-row index
	// (migration 0014): the host's history is not walked.
	res, err := q.write.ExecContext(ctx, `UPDATE event_queue SET next_attempt_at = ?, updated_at = ?
		WHERE target = ? AND status = 'pending' AND status <> 'done' AND next_attempt_at > ?`, now, now, target, now)
	if err != nil {
		return 0, fmt.Errorf("outbox: release target: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("outbox: release target: %w", err)
	}
	return n, nil
}

// ReleaseEvents makes the pending rows of eventIDs due now when they are
// waiting (deliveries deferred while their answers were awaited, now
// known), in one transaction of a statement per releaseChunk ids. Attempts
// are kept. It returns the ids whose rows changed: not those whose row is
// not pending yet (still being settled), already due, or gone.
func (q *Queue) ReleaseEvents(ctx context.Context, eventIDs []string) (map[string]bool, error) {
	released := make(map[string]bool, len(eventIDs))
	if len(eventIDs) == 0 {
		return released, nil
	}
	now := q.now().UnixMilli()
	err := plainTx(ctx, q.write, func(tx *sql.Tx) error {
		for rest := eventIDs; len(rest) > 0; {
			chunk := rest[:min(len(rest), releaseChunk)]
			rest = rest[len(chunk):]
			args := make([]any, 0, len(chunk)+3)
			args = append(args, now, now, now)
			for _, id := range chunk {
				args = append(args, id)
			}
			rows, err := tx.QueryContext(ctx, `UPDATE event_queue SET next_attempt_at = ?, updated_at = ?
				WHERE status = 'pending' AND next_attempt_at > ? AND event_id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)
				RETURNING event_id`, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				released[id] = true
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: release %d events: %w", len(eventIDs), err)
	}
	return released, nil
}

// releaseChunk is how many ids one statement of ReleaseEvents carries.
const releaseChunk = 200

// sqlStats sums the counts of event_queue_counts over their shards (one on
// SQLite; on PostgreSQL one per database backend that wrote, so that
// concurrent writers never wait for one counter row: migration 0016).
const sqlStats = `SELECT status, type, SUM(n) FROM (
		SELECT status, type, n FROM event_queue_counts
		UNION ALL SELECT status, type, n FROM event_queue_count_deltas) AS c
	GROUP BY status, type HAVING SUM(n) <> 0`

// Stats counts the outbox rows by status and type.
type Stats map[string]map[string]int64

// Stats returns the number of rows per status and event type (a gauge of
// the backlog for metrics and the admin API).
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	// Counts kept on write (migrations 0014, 0016 and 0020: Enqueue appends
	// what it inserts, triggers count changes of status and deletes), the
	// appended ones until a fold moves them: reading them costs the same at
	// any history.
	rs, err := q.read.QueryContext(ctx, sqlStats)
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	defer rs.Close()
	st := Stats{}
	for rs.Next() {
		var status, typ string
		var n int64
		if err := rs.Scan(&status, &typ, &n); err != nil {
			return nil, fmt.Errorf("outbox: stats: %w", err)
		}
		if st[status] == nil {
			st[status] = map[string]int64{}
		}
		st[status][typ] = n
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	return st, nil
}

// OldestPendingDue's query. PostgreSQL keeps the due rows of each lane in
// an index of their own (migration 0017), and takes the least of the two
// lanes' oldest (LEAST ignores a lane with none).
const (
	sqlOldestDue = `SELECT MIN(next_attempt_at) FROM event_queue
		WHERE status = 'pending' AND next_attempt_at <= ?`
	sqlOldestDuePostgres = `SELECT LEAST(
		(SELECT MIN(next_attempt_at) FROM event_queue WHERE status = 'pending' AND lane = 0 AND next_attempt_at <= ?),
		(SELECT MIN(next_attempt_at) FROM event_queue WHERE status = 'pending' AND lane <> 0 AND next_attempt_at <= ?))`
)

// OldestPendingDue returns the due time of the pending row that has been due
// the longest, and false when no pending row is due at now. Its age is how
// far the worker is behind.
func (q *Queue) OldestPendingDue(ctx context.Context, now time.Time) (time.Time, bool, error) {
	var due sql.NullInt64
	args := []any{now.UnixMilli()}
	if q.sql == postgresSQL {
		args = append(args, now.UnixMilli())
	}
	err := q.read.QueryRowContext(ctx, q.sql.oldestDue, args...).Scan(&due)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("outbox: oldest pending: %w", err)
	}
	if !due.Valid {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(due.Int64), true, nil
}

// HandBack returns a published event to the outbox: its row becomes pending
// again, due at until, with its republish count raised. The JetStream
// consumer hands back a deferred event this way instead of a nak with delay,
// which would count toward the consumer's max_deliver: the outbox is where a
// delivery parked for days waits, spends nothing, and is released at once by
// ReleaseTarget. The attempts the event spent stay as RecordFailure counted
// them.
//
// The row may not be done yet: the consumer can run the message before the
// relay settles its publish. HandBack clears the relay's claim, so the
// relay's late settle, conditioned on that claim, changes nothing. It
// reports false when there is no such row or it is dead-lettered, and the
// caller falls back to a nak.
func (q *Queue) HandBack(ctx context.Context, eventID string, until time.Time) (bool, error) {
	res, err := q.write.ExecContext(ctx, `UPDATE event_queue SET status = 'pending', next_attempt_at = ?,
		claimed_at = NULL, republished = republished + 1, updated_at = ?
		WHERE event_id = ? AND status <> 'dead_lettered'`, until.UnixMilli(), q.now().UnixMilli(), eventID)
	if err != nil {
		return false, fmt.Errorf("outbox: hand back %s: %w", eventID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("outbox: hand back %s: %w", eventID, err)
	}
	return n == 1, nil
}

// RecordFailure counts a failed delivery of a published event on its row
// (attempts and last error), for a bus whose retries happen elsewhere (the
// JetStream consumer): operators see the failures, and a hand-back keeps the
// count. It does not change the row's status.
func (q *Queue) RecordFailure(ctx context.Context, eventID string, failure error) error {
	_, err := q.write.ExecContext(ctx, `UPDATE event_queue SET attempts = attempts + 1, last_error = ?, updated_at = ?
		WHERE event_id = ?`, errText(failure), q.now().UnixMilli(), eventID)
	if err != nil {
		return fmt.Errorf("outbox: record failure of %s: %w", eventID, err)
	}
	return nil
}

// SweepResult counts what Sweep deleted.
type SweepResult struct {
	Ledger int64 // processed_events rows
	Done   int64 // done event_queue rows
}

// sweepChunk bounds each delete transaction of Sweep (ledger rows, or ids
// of the outbox), and sweepChunks the number of them per call and table, so
// a sweep never holds the write lock for long.
const (
	sweepChunk  = 1000
	sweepChunks = 1000
)

// The sweep's chunk of the ledger: by rowid on SQLite, by primary key on
// PostgreSQL (which has no rowid).
const (
	sqlSweepLedger = `DELETE FROM processed_events WHERE rowid IN
		(SELECT rowid FROM processed_events WHERE started_at < ? LIMIT ?)`
	sqlSweepLedgerPostgres = `DELETE FROM processed_events WHERE (event_id, handler) IN
		(SELECT event_id, handler FROM processed_events WHERE started_at < ? LIMIT ?)`
)

// sqlFoldCountsPostgres folds the outbox counts of PostgreSQL backends that
// have ended into shard 0 (migration 0016): each backend counts in a shard
// of its own, and a pool's connections come and go. Only rows no live
// backend writes are moved, in one statement, so the sums never change.
const sqlFoldCountsPostgres = `WITH gone AS (
		DELETE FROM event_queue_counts
		WHERE shard <> 0 AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
		RETURNING status, type, n)
	INSERT INTO event_queue_counts (status, type, shard, n)
	SELECT status, type, 0, SUM(n) FROM gone GROUP BY status, type ORDER BY status, type
	ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + EXCLUDED.n`

// The fold of the appended counts of new rows (migration 0020) into shard 0
// of event_queue_counts. On PostgreSQL one statement: the rows it deletes
// are exactly the rows it adds, whatever commits meanwhile, and a second
// fold at the same time waits for the rows the first deleted and passes
// them over. The shard-0 rows are taken in (status, type) order, as the
// fold of ended backends takes them, so that two folds never deadlock. On
// SQLite the one writer holds the file: a sum, then the delete.
const (
	sqlFoldDeltasPostgres = `WITH d AS (DELETE FROM event_queue_count_deltas RETURNING status, type, n)
	INSERT INTO event_queue_counts (status, type, shard, n)
	SELECT status, type, 0, SUM(n) FROM d GROUP BY status, type ORDER BY status, type
	ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + EXCLUDED.n`
	sqlFoldDeltasSum = `INSERT INTO event_queue_counts (status, type, shard, n)
	SELECT status, type, 0, SUM(n) FROM event_queue_count_deltas WHERE true GROUP BY status, type
	ON CONFLICT (status, type, shard) DO UPDATE SET n = event_queue_counts.n + excluded.n`
	sqlFoldDeltasDelete = `DELETE FROM event_queue_count_deltas`
)

// FoldCounts moves the counts that enqueues append (migration 0020) into
// event_queue_counts, where Stats reads them at the same cost however many
// enqueues ran. Stats is exact either way; the fold keeps what it sums
// small. The Sweeper runs it every CountFoldInterval.
func (q *Queue) FoldCounts(ctx context.Context) error {
	var err error
	if q.sql == postgresSQL {
		_, err = q.write.ExecContext(ctx, sqlFoldDeltasPostgres)
	} else {
		err = inTx(ctx, q.write, func(s *stmts) error {
			if _, err := s.exec(sqlFoldDeltasSum); err != nil {
				return err
			}
			_, err := s.exec(sqlFoldDeltasDelete)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("outbox: fold counts: %w", err)
	}
	return nil
}

// Sweep deletes ledger rows started before ledgerBefore and done outbox rows
// last updated before doneBefore, in bounded chunks. On PostgreSQL it also
// folds the outbox counts of ended database backends (migration 0016); on
// both it folds the appended counts (FoldCounts).
func (q *Queue) Sweep(ctx context.Context, ledgerBefore, doneBefore time.Time) (SweepResult, error) {
	var res SweepResult
	for range sweepChunks {
		r, err := q.write.ExecContext(ctx, q.sql.sweepLedger, ledgerBefore.UnixMilli(), sweepChunk)
		if err != nil {
			return res, fmt.Errorf("outbox: sweep: %w", err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return res, fmt.Errorf("outbox: sweep: %w", err)
		}
		res.Ledger += n
		if n < sweepChunk {
			break
		}
	}
	n, err := q.sweepDone(ctx, doneBefore)
	res.Done = n
	if err != nil {
		return res, fmt.Errorf("outbox: sweep: %w", err)
	}
	if q.sql.foldCounts != "" {
		if _, err := q.write.ExecContext(ctx, q.sql.foldCounts); err != nil {
			return res, fmt.Errorf("outbox: sweep: fold counts: %w", err)
		}
	}
	if err := q.FoldCounts(ctx); err != nil {
		return res, fmt.Errorf("outbox: sweep: %w", err)
	}
	return res, nil
}

// sweepDone deletes done rows last updated before before. No index keeps
// done rows (completing a row would write it: the hot path), so it walks the
// table in id order, sweepChunk ids per transaction, from the oldest row to
// the first one created at or after before: no row from there on can have
// been done before it. Rows in other states are passed over; they are few
// among the old ones (dead letters, rows deferred far ahead).
func (q *Queue) sweepDone(ctx context.Context, before time.Time) (int64, error) {
	var (
		deleted int64
		lo      sql.NullInt64
	)
	if err := q.write.QueryRowContext(ctx, `SELECT MIN(id) FROM event_queue`).Scan(&lo); err != nil || !lo.Valid {
		return 0, err
	}
	bound := before.UnixMilli()
	from := lo.Int64
	for range sweepChunks {
		var (
			n    int64
			more bool
		)
		err := inTx(ctx, q.write, func(s *stmts) error {
			var err error
			if n, err = s.exec(`DELETE FROM event_queue WHERE id >= ? AND id < ? AND status = 'done' AND updated_at < ?`,
				from, from+sweepChunk, bound); err != nil {
				return err
			}
			// Where the next chunk starts: the next row, unless it is too new.
			rs, err := s.query(`SELECT id, created_at FROM event_queue WHERE id >= ? ORDER BY id LIMIT 1`, from+sweepChunk)
			if err != nil {
				return err
			}
			defer rs.Close()
			if rs.Next() {
				var created int64
				if err := rs.Scan(&from, &created); err != nil {
					return err
				}
				more = created < bound
			}
			return rs.Err()
		})
		if err != nil {
			return deleted, err
		}
		deleted += n
		if !more {
			break
		}
	}
	return deleted, nil
}
