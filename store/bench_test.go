package store

import (
	"context"
	"crypto/rsa"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqlite"
)

// benchStore opens a production-configured store (synchronous=FULL).
func benchStore(b *testing.B) (*Store, *sqldb.DB) {
	b.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
		b.Fatal(err)
	}
	st := New(db, testBase, nil)
	st.newKey = func() (*rsa.PrivateKey, error) { return testKey() }
	return st, db
}

// rawCommitRate measures this machine's limit for the same shape of work:
// one data row and one outbox row per IMMEDIATE transaction on the same
// database, with no store logic.
func rawCommitRate(b *testing.B, db *sqldb.DB, n int) float64 {
	b.Helper()
	ctx := context.Background()
	if _, err := db.Write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, body TEXT)`); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO bench_raw (body) VALUES (?)`, "x"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO event_queue (type, payload, next_attempt_at, occurred_at, created_at, updated_at)
				VALUES ('bench', '{}', ?, ?, ?, ?)`, i, i, i, i)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkCreateNote measures a local write end to end (note row, built
// activity, activity row and outbox event in one durable transaction) and
// reports it against the raw commit rate measured in the same run.
func BenchmarkCreateNote(b *testing.B) {
	st, db := benchStore(b)
	ctx := context.Background()
	a, _, err := st.CreateActor(ctx, NewActor{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	raw := rawCommitRate(b, db, 300)
	in := NoteInput{Content: "<p>a benchmark note of ordinary length, with a little <b>markup</b></p>",
		To: []string{Public}, CC: []string{st.URIs().Followers("bench")}}
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, _, err := st.CreateNote(ctx, a, in); err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "notes/s")
	b.ReportMetric(raw, "raw_commits/s")
	b.ReportMetric(rate/raw, "ratio_to_raw")
}

// BenchmarkOutboxPage measures reading the first page of a 2,000-activity
// outbox (count plus keyset page).
func BenchmarkOutboxPage(b *testing.B) {
	st, _ := benchStore(b)
	ctx := context.Background()
	a, _, err := st.CreateActor(ctx, NewActor{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for range 2000 {
		if _, _, err := st.CreateNote(ctx, a, NoteInput{Content: "x", To: []string{Public}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		p, err := st.OutboxPage(ctx, a.ID, PageQuery{Limit: 20})
		if err != nil || len(p.Items) != 20 {
			b.Fatal(err)
		}
	}
}
