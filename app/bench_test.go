package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// BenchmarkInboxPage measures one page of an actor's inbox, over HTTP with
// the bearer token, on an empty view, on one of 100 items and on one of 10
// million (COURIER_BENCH_INBOX_ITEMS changes it), reading the newest page,
// a page from a cursor in the middle, and filtered pages from there. The
// view is filled with one INSERT ... SELECT from a recursive CTE
// (generate_series on PostgreSQL). Keyset paging on an index makes every
// size cost the same.
//
//	go test ./app/ -run '^$' -bench InboxPage -benchtime 2000x
func BenchmarkInboxPage(b *testing.B) {
	large := 10_000_000
	if v := os.Getenv("COURIER_BENCH_INBOX_ITEMS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("COURIER_BENCH_INBOX_ITEMS=%q", v)
		}
		large = n
	}
	for _, n := range []int{0, 100, large} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			bu := setup(b, app.Config{})
			alice, tok := bu.actor(b, "alice", false)
			if n > 0 {
				fill(b, bu, alice.ID, n)
			}
			for _, c := range []struct {
				name, query string
				full        bool // a page of 20 when the view is not empty
			}{
				{"newest", "?page=true", n > 0},
				{"middle", fmt.Sprintf("?page=true&max_id=%d", n/2+1), n > 0},
				// One item in ten is a Like, a notification.
				{"likes", fmt.Sprintf("?page=true&type=Like,Announce&max_id=%d", n/2+1), n >= 1000},
				{"notifications", fmt.Sprintf("?page=true&notifications=true&max_id=%d", n/2+1), n >= 1000},
			} {
				b.Run(c.name, func(b *testing.B) {
					url := bu.base + "/users/alice/inbox" + c.query
					req, err := http.NewRequest(http.MethodGet, url, nil)
					if err != nil {
						b.Fatal(err)
					}
					req.Header.Set("Authorization", "Bearer "+tok)
					b.ResetTimer()
					for range b.N {
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						p := decodePage(b, resp)
						if c.full && len(p.OrderedItems) != 20 || n == 0 && len(p.OrderedItems) != 0 {
							b.Fatalf("%d items on the page", len(p.OrderedItems))
						}
					}
				})
			}
		})
	}
}

// fill gives actor id n items in one statement, and its counter.
func fill(b *testing.B, bu *bundle, actorID int64, n int) {
	b.Helper()
	series := `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) SELECT i FROM s`
	if bu.db.Postgres() {
		series = `SELECT i FROM generate_series(1, ?::bigint) AS s(i)`
	}
	if _, err := bu.db.Write.Exec(`INSERT INTO app_inbox_items (actor_id, seq, activity_uri, type, kind, document, created_at)
		SELECT ?, i, 'https://remote.example/activities/' || i, CASE WHEN i % 10 = 0 THEN 'Like' ELSE 'Create' END,
			CASE WHEN i % 10 = 0 THEN 'like' ELSE '' END,
			'{"id":"https://remote.example/activities/' || i || '","type":"Create","actor":"https://remote.example/users/r"}', 0
		FROM (`+series+`) AS f`, actorID, n); err != nil {
		b.Fatal(err)
	}
	if _, err := bu.db.Write.Exec(`INSERT INTO app_inbox_counters (actor_id, seq) VALUES (?, ?)`, actorID, n); err != nil {
		b.Fatal(err)
	}
	if bu.db.Postgres() {
		// Vacuumed as autovacuum would have, so that no run of it, nor the
		// first reads' hint bits, lands in a measurement.
		if _, err := bu.db.Write.Exec(`VACUUM ANALYZE app_inbox_items`); err != nil {
			b.Fatal(err)
		}
	} else if _, err := bu.db.Write.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriteWithOutboxView measures a local write (CreateObject: note,
// activity, outbox event) with the outbox view's append in its
// transaction, against the same write by a store without the recorder's
// hook, on the same database in the same run: the view's cost per write.
//
//	go test ./app/ -run '^$' -bench WriteWithOutboxView -benchtime 300x
func BenchmarkWriteWithOutboxView(b *testing.B) {
	db := storetest.New(b)
	ctx := context.Background()
	plain := store.New(db, "https://courier.test", nil)
	viewed := store.New(db, "https://courier.test", nil)
	if _, err := app.NewRecorder(app.RecorderConfig{DB: db, Store: viewed}); err != nil {
		b.Fatal(err)
	}
	a, _, err := plain.CreateActor(ctx, store.NewActor{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	in := notetest.Input{Content: "<p>a benchmark note of ordinary length</p>", To: []string{store.Public}}
	rate := func(st *store.Store, n int) float64 {
		start := time.Now()
		for range n {
			if _, _, err := notetest.Create(ctx, st, a, in); err != nil {
				b.Fatal(err)
			}
		}
		return float64(n) / time.Since(start).Seconds()
	}
	base := rate(plain, 200)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, _, err := notetest.Create(ctx, viewed, a, in); err != nil {
			b.Fatal(err)
		}
	}
	with := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(with, "writes/s")
	b.ReportMetric(base, "writes_without_view/s")
	b.ReportMetric(with/base, "ratio")
}
