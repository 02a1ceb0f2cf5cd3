package storecopy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/courier-ap/courier/sqldb"
)

// copier copies tables from the source's locked transaction to the target.
type copier struct {
	src  *sql.Tx
	dst  *sqldb.DB
	opts Options
}

func (c *copier) batchSize(p *plan) int {
	return max(1, min(c.opts.BatchSize, maxParams/len(p.cols)))
}

// insertSQL inserts n rows of p, ignoring a primary key already there: a
// row copied by an earlier run is not copied twice, and any other unique
// violation (a row of another instance) fails loudly.
func insertSQL(p *plan, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + quote(p.name) + " (" + p.colList() + ") VALUES ")
	row := placeholders(len(p.cols))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(" ON CONFLICT " + p.keyTuple() + " DO NOTHING")
	return b.String()
}

// copyTable copies the rows of p the target does not have yet, in key
// order, one batch per statement (each its own transaction), and returns
// how many it wrote. One goroutine reads the source while another writes
// the batch before to the target.
func (c *copier) copyTable(ctx context.Context, p *plan, index, tables int) (int64, error) {
	var total int64
	if err := c.src.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quote(p.name)).Scan(&total); err != nil {
		return 0, fmt.Errorf("storecopy: count %s on the source: %w", p.name, err)
	}
	done, after, err := c.resumePoint(ctx, p)
	if err != nil {
		return 0, err
	}
	report := func(finished bool) {
		c.opts.Progress(Progress{Table: p.name, Index: index, Tables: tables, Done: done, Total: total, Finished: finished})
	}
	var copied int64
	if done < total {
		size := c.batchSize(p)
		batches := make(chan []any, 2)
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error {
			defer close(batches)
			return c.read(gctx, p, after, size, batches)
		})
		g.Go(func() error {
			full := insertSQL(p, size)
			for buf := range batches {
				n := len(buf) / len(p.cols)
				query := full
				if n < size {
					query = insertSQL(p, n)
				}
				if _, err := c.dst.Write.ExecContext(gctx, query, buf...); err != nil {
					return fmt.Errorf("storecopy: write %s (the batch from key %v): %w", p.name, keyOf(p, buf), err)
				}
				copied += int64(n)
				done += int64(n)
				report(false)
			}
			return nil
		})
		if err := g.Wait(); err != nil {
			return copied, err
		}
	}
	report(true)
	c.opts.Logger.InfoContext(ctx, "table copied", "table", p.name, "rows", total, "copied", copied)
	return copied, nil
}

// read sends p's source rows after the key after (all when nil), in key
// order, to out in batches of size rows, flattened.
func (c *copier) read(ctx context.Context, p *plan, after []any, size int, out chan<- []any) error {
	query := `SELECT ` + p.colList() + ` FROM ` + quote(p.name)
	if after != nil {
		query += ` WHERE ` + p.keyTuple() + ` > ` + placeholders(len(p.key))
	}
	rows, err := c.src.QueryContext(ctx, query+` ORDER BY `+p.order(false, false), after...)
	if err != nil {
		return fmt.Errorf("storecopy: read %s: %w", p.name, err)
	}
	defer rows.Close()
	send := func(buf []any) error {
		select {
		case out <- buf:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	buf := make([]any, 0, size*len(p.cols))
	for rows.Next() {
		vals, err := p.scanRow(rows)
		if err != nil {
			return fmt.Errorf("storecopy: read %s: %w", p.name, err)
		}
		buf = append(buf, vals...)
		if len(buf) == cap(buf) {
			if err := send(buf); err != nil {
				return err
			}
			buf = make([]any, 0, size*len(p.cols))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("storecopy: read %s: %w", p.name, err)
	}
	if len(buf) > 0 {
		return send(buf)
	}
	return nil
}

// keyOf is the primary key of the first row in buf, for messages.
func keyOf(p *plan, buf []any) []any {
	out := make([]any, len(p.key))
	for i, k := range p.key {
		out[i] = buf[k]
	}
	return out
}

// resumePoint finds how far an earlier copy got with p: the target's row
// count and its last key. An earlier copy leaves a prefix of the source's
// rows in key order; a target that is not one is refused (ErrNotACopy).
func (c *copier) resumePoint(ctx context.Context, p *plan) (int64, []any, error) {
	var n int64
	if err := c.dst.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quote(p.name)).Scan(&n); err != nil {
		return 0, nil, fmt.Errorf("storecopy: count %s on the target: %w", p.name, err)
	}
	if n == 0 {
		return 0, nil, nil
	}
	last, err := oneRow(ctx, c.dst.Read, p, ` ORDER BY `+p.order(true, true)+` LIMIT 1`)
	if err != nil {
		return 0, nil, fmt.Errorf("storecopy: last row of %s on the target: %w", p.name, err)
	}
	key := make([]any, len(p.key))
	for i, k := range p.key {
		key[i] = last[k]
	}
	var upTo int64
	if err := c.src.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quote(p.name)+` WHERE `+p.keyTuple()+` <= `+placeholders(len(key)), key...).Scan(&upTo); err != nil {
		return 0, nil, fmt.Errorf("storecopy: count %s on the source: %w", p.name, err)
	}
	same, err := oneRow(ctx, c.src, p, ` WHERE `+p.keyTuple()+` = `+placeholders(len(key)), key...)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, nil, fmt.Errorf("storecopy: row of %s on the source: %w", p.name, err)
	}
	if upTo != n || same == nil || rowHash(same) != rowHash(last) {
		return 0, nil, fmt.Errorf("%w: %s has %d rows on the target up to key %v, and the source %d, or that row differs; copy into an empty database (or into the one an interrupted copy of this same source left)", ErrNotACopy, p.name, n, key, upTo)
	}
	return n, key, nil
}

// oneRow reads the first row of p in q after the clause rest; no row is
// sql.ErrNoRows.
func oneRow(ctx context.Context, q querier, p *plan, rest string, args ...any) ([]any, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+p.colList()+` FROM `+quote(p.name)+rest, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, sql.ErrNoRows
	}
	return p.scanRow(rows)
}

// replaceTable replaces p's rows on the target by the source's in one
// transaction, unless they are equal already, and returns how many it
// wrote. It serves the tables kept on write, which copying the rows they
// are kept from does not reproduce on the target.
func (c *copier) replaceTable(ctx context.Context, p *plan, index, tables int) (int64, error) {
	sn, ss, err := checksum(ctx, c.src, p)
	if err != nil {
		return 0, fmt.Errorf("storecopy: read %s: %w", p.name, err)
	}
	tn, ts, err := checksum(ctx, c.dst.Read, p)
	if err != nil {
		return 0, fmt.Errorf("storecopy: read %s on the target: %w", p.name, err)
	}
	if sn == tn && ss == ts {
		c.opts.Progress(Progress{Table: p.name, Index: index, Tables: tables, Done: sn, Total: sn, Finished: true})
		return 0, nil
	}
	rows, err := c.src.QueryContext(ctx, `SELECT `+p.colList()+` FROM `+quote(p.name)+` ORDER BY `+p.order(false, false))
	if err != nil {
		return 0, fmt.Errorf("storecopy: read %s: %w", p.name, err)
	}
	defer rows.Close()
	var all [][]any
	for rows.Next() {
		vals, err := p.scanRow(rows)
		if err != nil {
			return 0, fmt.Errorf("storecopy: read %s: %w", p.name, err)
		}
		all = append(all, vals)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("storecopy: read %s: %w", p.name, err)
	}
	size := c.batchSize(p)
	err = c.dst.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+quote(p.name)); err != nil {
			return err
		}
		for start := 0; start < len(all); start += size {
			chunk := all[start:min(start+size, len(all))]
			args := make([]any, 0, len(chunk)*len(p.cols))
			for _, r := range chunk {
				args = append(args, r...)
			}
			if _, err := tx.ExecContext(ctx, insertSQL(p, len(chunk)), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storecopy: replace %s: %w", p.name, err)
	}
	n := int64(len(all))
	c.opts.Progress(Progress{Table: p.name, Index: index, Tables: tables, Done: n, Total: n, Finished: true})
	c.opts.Logger.InfoContext(ctx, "table copied", "table", p.name, "rows", n, "copied", n)
	return n, nil
}

// resetSequences moves every identity column's sequence past the largest
// id copied, so the first row PostgreSQL numbers itself does not collide.
func resetSequences(ctx context.Context, db *sql.DB, plans []*plan) error {
	for _, p := range plans {
		for _, col := range p.identity {
			_, err := db.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence(?, ?), COALESCE((SELECT MAX(`+quote(col)+`) FROM `+quote(p.name)+`), 0) + 1, false)`, p.name, col)
			if err != nil {
				return fmt.Errorf("storecopy: reset the sequence of %s.%s: %w", p.name, col, err)
			}
		}
	}
	return nil
}
