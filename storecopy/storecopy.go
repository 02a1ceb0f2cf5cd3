// Package storecopy moves a stopped courier instance from its SQLite file to
// a PostgreSQL database: every table of the schema, row for row, so that the
// servers and workers started on PostgreSQL carry on where the SQLite
// instance stopped (its actors and keys, its outbox with every status, its
// ledger, its deliveries and the health of every remote host).
//
// A stopped instance is the precondition. Run refuses a file another
// process has open (on Linux, where /proc/locks shows the lock every WAL
// connection holds on the -shm file), and the copy holds the source's write
// lock (BEGIN IMMEDIATE) from start to end, so it reads one consistent state
// and a courier still running on the file cannot write beside it (its
// writes wait, then fail). It migrates the
// target to the binary's schema version, refuses a source at any other
// version, and refuses a target that holds rows which are not a prefix of
// the source's (an earlier, interrupted copy of the same source is one).
// Tables are filled in foreign-key order, each in primary-key order, in
// batches of one transaction each, so an interrupted copy leaves every
// table a prefix of the source's and a re-run resumes after the last key
// copied; the inserts also ignore a primary key already present. At the end
// the identity sequences are moved past the copied ids and every table's
// row count and checksum are compared on both sides.
package storecopy

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqlite"
)

// Errors a caller tells apart.
var (
	// ErrSource is a source that is missing or cannot be copied as it is
	// (not a courier database, another schema version, locked).
	ErrSource = errors.New("storecopy: source")
	// ErrSchema is a table or column the copy does not know, on either side.
	ErrSchema = errors.New("storecopy: schema")
	// ErrNotACopy is a target holding rows the source does not have.
	ErrNotACopy = errors.New("storecopy: target holds rows that are not the source's")
	// ErrVerify is a target whose rows differ from the source's after the copy.
	ErrVerify = errors.New("storecopy: verification failed")
)

// maxParams is PostgreSQL's bound on the parameters of one statement.
const maxParams = 65535

// Options tunes Copy and Run. The zero value is the production setting.
type Options struct {
	// BatchSize is how many rows go into one INSERT, one transaction on the
	// target (default 500; lowered for wide tables to stay under
	// PostgreSQL's 65535 parameters).
	BatchSize int
	// Progress, when set, is called after every batch and once when a
	// table is complete, from one goroutine at a time. It must not block.
	Progress func(Progress)
	// Logger receives one line per table copied (nil: discarded).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.Progress == nil {
		o.Progress = func(Progress) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Progress is where the copy of one table stands.
type Progress struct {
	Table string
	// Index is the table's place (from 1) among Tables.
	Index, Tables int
	// Done is how many of the table's Total rows are on the target.
	Done, Total int64
	// Finished is set on the table's last report.
	Finished bool
	// Verifying is set on the reports of the last phase: the comparison
	// of the table's rows on both sides begins (Done and Total are zero).
	Verifying bool
}

// TableResult is what the copy found and did for one table.
type TableResult struct {
	Table string
	// Rows is the table's row count, the same on both sides.
	Rows int64
	// Copied is how many rows this run wrote (fewer than Rows when it
	// resumed an interrupted copy).
	Copied int64
	// Checksum is the order-independent checksum of the table's rows, the
	// same on both sides.
	Checksum uint64
}

// Run copies the SQLite database at the path from into the PostgreSQL
// database at the URL to, opening and closing both. A missing file is
// ErrSource, and so is a file another process has open (on Linux, where
// /proc/locks tells); a bad URL is postgres.ErrURL.
func Run(ctx context.Context, from, to string, opts Options) ([]TableResult, error) {
	if from == "" {
		return nil, fmt.Errorf("%w: no SQLite file given", ErrSource)
	}
	if _, err := os.Stat(from); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSource, err)
	}
	if !postgres.IsURL(to) {
		return nil, fmt.Errorf("%w: %q is not a postgres:// URL", postgres.ErrURL, postgres.Redact(to))
	}
	pids, err := otherOpeners(from)
	if err != nil {
		return nil, fmt.Errorf("%w: who has %s open: %w", ErrSource, from, err)
	}
	if len(pids) > 0 {
		return nil, fmt.Errorf("%w: %s is open in another process (pid %v): stop every courier process on it first", ErrSource, from, pids)
	}
	src, err := sqlite.Open(ctx, from, sqlite.Options{Logger: opts.Logger, ReadConns: 1})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSource, err)
	}
	defer src.Close()
	dst, err := postgres.Open(ctx, to, postgres.Options{MaxConns: 4, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	return Copy(ctx, src, dst, opts)
}

// Copy copies the whole state of src, a SQLite store, into dst, a
// PostgreSQL store, as the package comment says. dst is migrated first.
func Copy(ctx context.Context, src, dst *sqldb.DB, opts Options) ([]TableResult, error) {
	opts = opts.withDefaults()
	if src.Dialect != sqldb.SQLite || dst.Dialect != sqldb.Postgres {
		return nil, fmt.Errorf("storecopy: copies SQLite to PostgreSQL, not %s to %s", src.Dialect, dst.Dialect)
	}
	// The write lock, held to the end: one consistent state, and nobody
	// else writes the file meanwhile.
	tx, err := src.Write.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: lock %s for the copy (stop every courier process on it first): %w", ErrSource, src.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // the source is only read
	if err := checkVersion(ctx, tx, src.Name); err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, dst.Write, migrations.Options{Logger: opts.Logger}); err != nil {
		return nil, fmt.Errorf("storecopy: migrate the target: %w", err)
	}
	plans, err := planAll(ctx, tx, dst.Read)
	if err != nil {
		return nil, err
	}
	c := &copier{src: tx, dst: dst, opts: opts}
	results := make([]TableResult, len(plans))
	for i, p := range plans {
		results[i].Table = p.name
		if p.replace {
			continue
		}
		n, err := c.copyTable(ctx, p, i+1, len(plans))
		if err != nil {
			return nil, err
		}
		results[i].Copied = n
	}
	for i, p := range plans {
		if !p.replace {
			continue
		}
		n, err := c.replaceTable(ctx, p, i+1, len(plans))
		if err != nil {
			return nil, err
		}
		results[i].Copied = n
	}
	if err := resetSequences(ctx, dst.Write, plans); err != nil {
		return nil, err
	}
	var bad []string
	for i, p := range plans {
		opts.Progress(Progress{Table: p.name, Index: i + 1, Tables: len(plans), Verifying: true})
		var (
			sn, tn int64
			ss, ts uint64
		)
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) {
			if sn, ss, err = checksum(gctx, tx, p); err != nil {
				return fmt.Errorf("storecopy: verify %s on the source: %w", p.name, err)
			}
			return nil
		})
		g.Go(func() (err error) {
			if tn, ts, err = checksum(gctx, dst.Read, p); err != nil {
				return fmt.Errorf("storecopy: verify %s on the target: %w", p.name, err)
			}
			return nil
		})
		if err := g.Wait(); err != nil {
			return nil, err
		}
		if sn != tn || ss != ts {
			bad = append(bad, fmt.Sprintf("%s (source %d rows, checksum %016x; target %d rows, checksum %016x)", p.name, sn, ss, tn, ts))
		}
		results[i].Rows, results[i].Checksum = sn, ss
	}
	if len(bad) > 0 {
		return results, fmt.Errorf("%w: %s; the source changed since an earlier copy, or the target was written: drop the target database and copy again", ErrVerify, strings.Join(bad, ", "))
	}
	return results, nil
}

// checkVersion refuses a source that is not at the binary's latest version.
func checkVersion(ctx context.Context, tx *sql.Tx, name string) error {
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("%w: %s is not a courier database: %w", ErrSource, name, err)
	}
	latest := migrations.Latest()
	switch {
	case int(v.Int64) < latest:
		return fmt.Errorf("%w: %s is at schema version %d, this courier at %d: run `courier migrate --db %s` with this binary first", ErrSource, name, v.Int64, latest, name)
	case int(v.Int64) > latest:
		return fmt.Errorf("%w: %s is at schema version %d, newer than this courier's %d: copy with the courier that last ran on it", ErrSource, name, v.Int64, latest)
	}
	return nil
}

// kind is how a column's values are compared and sent: the target's type.
type kind uint8

const (
	kindInt kind = iota + 1
	kindText
	kindBytes
	kindFloat
)

func kindOf(pgType string) (kind, bool) {
	switch pgType {
	case "bigint", "integer", "smallint":
		return kindInt, true
	case "text", "character varying", "character":
		return kindText, true
	case "bytea":
		return kindBytes, true
	case "double precision", "real":
		return kindFloat, true
	}
	return 0, false
}

// plan is one table ready to copy: its columns in the source's order, the
// kind of each, and its primary key.
type plan struct {
	table
	cols     []string
	kinds    []kind
	key      []int    // indexes into cols, in primary-key order
	identity []string // identity columns on the target
}

// querier is what both a source transaction and the target pool offer.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// planAll reads both schemas and checks them against tables: the same
// tables on both sides and in the list, the same columns and primary keys,
// foreign keys pointing to earlier tables only.
func planAll(ctx context.Context, src, dst querier) ([]*plan, error) {
	known := map[string]int{migrationsTable: -1}
	for i, t := range tables {
		known[t.name] = i
	}
	srcTables, err := strings1(ctx, src, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		return nil, fmt.Errorf("storecopy: list the source's tables: %w", err)
	}
	dstTables, err := strings1(ctx, dst, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`)
	if err != nil {
		return nil, fmt.Errorf("storecopy: list the target's tables: %w", err)
	}
	for side, names := range map[string][]string{"source": srcTables, "target": dstTables} {
		for _, n := range names {
			if _, ok := known[n]; !ok {
				return nil, fmt.Errorf("%w: the %s has a table %q this copy does not know; it would be left behind, so nothing is copied (storecopy's table list must name every table of the migrations)", ErrSchema, side, n)
			}
		}
		for _, t := range tables {
			if !slices.Contains(names, t.name) {
				return nil, fmt.Errorf("%w: the %s has no table %q", ErrSchema, side, t.name)
			}
		}
	}
	plans := make([]*plan, 0, len(tables))
	for i, t := range tables {
		p, err := planOne(ctx, src, dst, t)
		if err != nil {
			return nil, err
		}
		refs, err := strings1(ctx, src, `SELECT "table" FROM pragma_foreign_key_list(?)`, t.name)
		if err != nil {
			return nil, fmt.Errorf("storecopy: foreign keys of %s: %w", t.name, err)
		}
		for _, r := range refs {
			if j, ok := known[r]; !ok || j >= i {
				return nil, fmt.Errorf("%w: %s references %s, which the copy does not fill before it", ErrSchema, t.name, r)
			}
		}
		plans = append(plans, p)
	}
	return plans, nil
}

func planOne(ctx context.Context, src, dst querier, t table) (*plan, error) {
	p := &plan{table: t}
	// Source columns and primary key.
	rows, err := src.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info(?) ORDER BY cid`, t.name)
	if err != nil {
		return nil, fmt.Errorf("storecopy: columns of %s on the source: %w", t.name, err)
	}
	var pk []struct{ pos, col int }
	for rows.Next() {
		var name string
		var pos int
		if err := rows.Scan(&name, &pos); err != nil {
			rows.Close()
			return nil, fmt.Errorf("storecopy: columns of %s on the source: %w", t.name, err)
		}
		if pos > 0 {
			pk = append(pk, struct{ pos, col int }{pos, len(p.cols)})
		}
		p.cols = append(p.cols, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storecopy: columns of %s on the source: %w", t.name, err)
	}
	slices.SortFunc(pk, func(a, b struct{ pos, col int }) int { return a.pos - b.pos })
	for _, k := range pk {
		p.key = append(p.key, k.col)
	}
	if len(p.key) == 0 {
		return nil, fmt.Errorf("%w: %s has no primary key on the source", ErrSchema, t.name)
	}
	// Target columns, their types and identities.
	rows, err = dst.QueryContext(ctx, `SELECT column_name, data_type, is_identity FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position`, t.name)
	if err != nil {
		return nil, fmt.Errorf("storecopy: columns of %s on the target: %w", t.name, err)
	}
	types := map[string]string{}
	var dstCols []string
	for rows.Next() {
		var name, typ, ident string
		if err := rows.Scan(&name, &typ, &ident); err != nil {
			rows.Close()
			return nil, fmt.Errorf("storecopy: columns of %s on the target: %w", t.name, err)
		}
		types[name] = typ
		dstCols = append(dstCols, name)
		if ident == "YES" {
			p.identity = append(p.identity, name)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("storecopy: columns of %s on the target: %w", t.name, err)
	}
	if a, b := slices.Sorted(slices.Values(p.cols)), slices.Sorted(slices.Values(dstCols)); !slices.Equal(a, b) {
		return nil, fmt.Errorf("%w: %s has columns %v on the source and %v on the target", ErrSchema, t.name, a, b)
	}
	for _, c := range p.cols {
		k, ok := kindOf(types[c])
		if !ok {
			return nil, fmt.Errorf("%w: %s.%s has type %s on the target, which the copy does not know", ErrSchema, t.name, c, types[c])
		}
		p.kinds = append(p.kinds, k)
	}
	dstKey, err := strings1(ctx, dst, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = to_regclass(?) AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, t.name)
	if err != nil {
		return nil, fmt.Errorf("storecopy: primary key of %s on the target: %w", t.name, err)
	}
	if !slices.Equal(dstKey, p.keyCols()) {
		return nil, fmt.Errorf("%w: %s has primary key %v on the source and %v on the target", ErrSchema, t.name, p.keyCols(), dstKey)
	}
	return p, nil
}

func (p *plan) keyCols() []string {
	out := make([]string, len(p.key))
	for i, k := range p.key {
		out[i] = p.cols[k]
	}
	return out
}

func quote(name string) string { return `"` + name + `"` }

func (p *plan) colList() string {
	q := make([]string, len(p.cols))
	for i, c := range p.cols {
		q[i] = quote(c)
	}
	return strings.Join(q, ", ")
}

// keyTuple is the primary key as a row value, "(a, b)".
func (p *plan) keyTuple() string {
	q := make([]string, len(p.key))
	for i, k := range p.key {
		q[i] = quote(p.cols[k])
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// order is the primary key order; on PostgreSQL text keys compare
// bytewise (COLLATE "C"), as SQLite's BINARY collation does, so both sides
// agree on which key is the last.
func (p *plan) order(desc, target bool) string {
	q := make([]string, len(p.key))
	for i, k := range p.key {
		q[i] = quote(p.cols[k])
		if target && p.kinds[k] == kindText {
			q[i] += ` COLLATE "C"`
		}
		if desc {
			q[i] += " DESC"
		}
	}
	return strings.Join(q, ", ")
}

func placeholders(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

// scanRow reads one row of p's columns, normalised to the target's kinds.
func (p *plan) scanRow(rows *sql.Rows) ([]any, error) {
	vals := make([]any, len(p.cols))
	ptrs := make([]any, len(p.cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	for i, v := range vals {
		n, err := normalise(v, p.kinds[i])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", p.cols[i], err)
		}
		vals[i] = n
	}
	return vals, nil
}

// normalise turns a value read from either store into the Go type of its
// column's kind: int64, string, []byte or float64 (or nil). SQLite's
// dynamic typing may hand an INTEGER column's value over as text, or a
// TEXT column's as a blob; what cannot be converted without loss is an
// error rather than a guess.
func normalise(v any, k kind) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch k {
	case kindInt:
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
				return int64(x), nil
			}
		case string:
			if n, err := strconv.ParseInt(x, 10, 64); err == nil {
				return n, nil
			}
		case []byte:
			if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				return n, nil
			}
		}
	case kindText:
		switch x := v.(type) {
		case string:
			if utf8.ValidString(x) && !strings.ContainsRune(x, 0) {
				return x, nil
			}
		case []byte:
			if utf8.Valid(x) && !slices.Contains(x, 0) {
				return string(x), nil
			}
		case int64:
			return strconv.FormatInt(x, 10), nil
		}
	case kindBytes:
		switch x := v.(type) {
		case []byte:
			return slices.Clone(x), nil
		case string:
			return []byte(x), nil
		}
	case kindFloat:
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		}
	}
	return nil, fmt.Errorf("value %.40q of Go type %T does not fit the target's column", fmt.Sprint(v), v)
}

// rowHash is one row's contribution to a table's checksum.
func rowHash(vals []any) uint64 {
	h := sha256.New()
	var b [9]byte
	for _, v := range vals {
		switch x := v.(type) {
		case nil:
			b[0] = 0
			h.Write(b[:1])
		case int64:
			b[0] = 1
			binary.BigEndian.PutUint64(b[1:], uint64(x))
			h.Write(b[:])
		case float64:
			b[0] = 2
			binary.BigEndian.PutUint64(b[1:], math.Float64bits(x))
			h.Write(b[:])
		case string:
			b[0] = 3
			binary.BigEndian.PutUint64(b[1:], uint64(len(x)))
			h.Write(b[:])
			h.Write([]byte(x))
		case []byte:
			b[0] = 4
			binary.BigEndian.PutUint64(b[1:], uint64(len(x)))
			h.Write(b[:])
			h.Write(x)
		}
	}
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// checksum counts p's rows in q and sums their hashes: a checksum that
// does not depend on the order rows come in, so each store reads them in
// its own.
func checksum(ctx context.Context, q querier, p *plan) (int64, uint64, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+p.colList()+` FROM `+quote(p.name))
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	var n int64
	var sum uint64
	for rows.Next() {
		vals, err := p.scanRow(rows)
		if err != nil {
			return 0, 0, err
		}
		n++
		sum += rowHash(vals)
	}
	return n, sum, rows.Err()
}

func strings1(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
