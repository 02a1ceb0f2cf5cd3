package storecopy

import (
	"context"
	"testing"
	"time"

	"github.com/courier-ap/courier/migrations"
)

// BenchmarkCopy copies an instance of 20,000 outbox rows (and a few of
// every other table) into a new database per iteration, at the production
// batch size, verification included, and compares its rows/s with the
// machine's limit measured in the same run: the same rows, read into
// memory beforehand, written by the same multi-row INSERTs into another new
// database with nothing else around them.
//
//	go test ./storecopy/ -run '^$' -bench BenchmarkCopy -benchtime 3x
func BenchmarkCopy(b *testing.B) {
	ctx := context.Background()
	_, src := newSource(b)
	populate(b, src, 20_000)

	// The ceiling: every table's rows from memory into PostgreSQL.
	tx, err := src.Read.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	_, probe := newTarget(b)
	if _, err := migrations.Apply(ctx, probe.Write, migrations.Options{Dialect: migrations.Postgres}); err != nil {
		b.Fatal(err)
	}
	plans, err := planAll(ctx, tx, probe.Read)
	if err != nil {
		b.Fatal(err)
	}
	type tableRows struct {
		p    *plan
		rows [][]any
	}
	var all []tableRows
	var rows int64
	for _, p := range plans {
		r, err := tx.QueryContext(ctx, `SELECT `+p.colList()+` FROM `+quote(p.name)+` ORDER BY `+p.order(false, false))
		if err != nil {
			b.Fatal(err)
		}
		tr := tableRows{p: p}
		for r.Next() {
			vals, err := p.scanRow(r)
			if err != nil {
				b.Fatal(err)
			}
			tr.rows = append(tr.rows, vals)
		}
		r.Close()
		all = append(all, tr)
		rows += int64(len(tr.rows))
	}
	tx.Rollback() //nolint:errcheck // read only

	var copyTime, rawTime time.Duration
	for b.Loop() {
		b.StopTimer()
		_, raw := newTarget(b)
		if _, err := migrations.Apply(ctx, raw.Write, migrations.Options{Dialect: migrations.Postgres}); err != nil {
			b.Fatal(err)
		}
		_, dst := newTarget(b)
		start := time.Now()
		for _, tr := range all {
			if tr.p.replace {
				continue // rows the triggers wrote already
			}
			size := max(1, min(500, maxParams/len(tr.p.cols)))
			for i := 0; i < len(tr.rows); i += size {
				chunk := tr.rows[i:min(i+size, len(tr.rows))]
				args := make([]any, 0, len(chunk)*len(tr.p.cols))
				for _, row := range chunk {
					args = append(args, row...)
				}
				if _, err := raw.Write.ExecContext(ctx, insertSQL(tr.p, len(chunk)), args...); err != nil {
					b.Fatal(err)
				}
			}
		}
		rawTime += time.Since(start)
		b.StartTimer()
		start = time.Now()
		if _, err := Copy(ctx, src, dst, Options{}); err != nil {
			b.Fatal(err)
		}
		copyTime += time.Since(start)
	}
	copyRate := float64(rows) * float64(b.N) / copyTime.Seconds()
	rawRate := float64(rows) * float64(b.N) / rawTime.Seconds()
	b.ReportMetric(copyRate, "rows/s")
	b.ReportMetric(rawRate, "raw_rows/s")
	b.ReportMetric(copyRate/rawRate, "ratio")
}
