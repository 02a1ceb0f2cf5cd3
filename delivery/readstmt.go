package delivery

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
)

// readStmt is a query of the read pool prepared at its first use: the
// SQLite driver keeps no statement cache, and the host and scheme reads
// run for every delivery or fan-out. While it cannot be prepared (logged
// once), each use runs the query text.
type readStmt struct {
	pool  *sql.DB
	query string
	log   *slog.Logger

	once sync.Once
	st   *sql.Stmt
}

func newReadStmt(pool *sql.DB, query string, log *slog.Logger) *readStmt {
	return &readStmt{pool: pool, query: query, log: log}
}

// prepare prepares the query at the first use.
func (r *readStmt) prepare(ctx context.Context) {
	r.once.Do(func() {
		st, err := r.pool.PrepareContext(ctx, r.query)
		if err != nil {
			r.log.WarnContext(ctx, "delivery: prepare read; running it unprepared", "err", err)
			return
		}
		r.st = st
	})
}

// QueryRowContext runs the query with args.
func (r *readStmt) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	r.prepare(ctx)
	if r.st == nil {
		return r.pool.QueryRowContext(ctx, r.query, args...)
	}
	return r.st.QueryRowContext(ctx, args...)
}

// QueryContext runs the query with args.
func (r *readStmt) QueryContext(ctx context.Context, args ...any) (*sql.Rows, error) {
	r.prepare(ctx)
	if r.st == nil {
		return r.pool.QueryContext(ctx, r.query, args...)
	}
	return r.st.QueryContext(ctx, args...)
}
