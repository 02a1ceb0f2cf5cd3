package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/sqlite"
)

// scaleSizes are the done-row counts BenchmarkOpsAtScale fills:
// COURIER_BENCH_DONE_ROWS (comma-separated) or 0, 1 M and 10 M.
func scaleSizes(b *testing.B) []int {
	s := os.Getenv("COURIER_BENCH_DONE_ROWS")
	if s == "" {
		return []int{0, 1_000_000, 10_000_000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			b.Fatalf("COURIER_BENCH_DONE_ROWS=%q: want whole numbers", s)
		}
		out = append(out, n)
	}
	return out
}

// Open work beside the history: what an operator looks at.
const (
	scaleHosts      = 100
	scalePending    = 1_000
	scaleDead       = 1_000
	scaleProcessing = 10
)

// fillHistory writes done delivery rows with their ledger rows, delivery
// targets and attempts, then the open rows, each table with one INSERT ...
// SELECT from a recursive CTE. Filling is set-up, so it runs with
// synchronous=OFF on its own handle; the process measured opens the file
// with the production settings.
func fillHistory(b *testing.B, path string, done int) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UnixMilli()
	old := now - 3600_000 // an hour ago: inside retention, so nothing is swept
	seq := func(n int) string {
		return fmt.Sprintf(`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < %d) `, n)
	}
	evID := `printf('00000000-0000-4000-8000-%012d', i)`
	host := fmt.Sprintf(`printf('h%%03d.example', i %% %d)`, scaleHosts)
	stmts := []string{
		`PRAGMA synchronous = OFF`,
		fmt.Sprintf(`INSERT INTO delivery_hosts (host, updated_at) SELECT %s, %d FROM (%s SELECT i FROM seq)`, host, now, seq(scaleHosts)),
		`UPDATE delivery_hosts SET state = 'unavailable', unavailable_since = ` + strconv.FormatInt(old, 10) + `, last_error = 'HTTP 503' WHERE host IN ('h001.example', 'h002.example')`,
	}
	if done > 0 {
		stmts = append(stmts,
			fmt.Sprintf(`INSERT INTO event_queue (event_id, type, target, payload, status, attempts, next_attempt_at, occurred_at, created_at, updated_at)
				%s SELECT %s, 'delivery.post', %s, '{}', 'done', 1, %d, %d, %d, %d FROM seq`, seq(done), evID, host, old, old, old, old),
			fmt.Sprintf(`INSERT INTO processed_events (event_id, handler, status, started_at, processed_at)
				%s SELECT %s, 'delivery.post', 'done', %d, %d FROM seq`, seq(done), evID, old, old),
			fmt.Sprintf(`INSERT INTO delivery_targets (event_id, parent_event_id, activity_id, inbox, host, created_at)
				%s SELECT %s, printf('p-%%d', i / 100), printf('https://local.example/activities/%%d', i / 100), 'https://' || %s || '/inbox', %s, %d FROM seq`,
				seq(done), evID, host, host, old),
			fmt.Sprintf(`INSERT INTO delivery_attempts (event_id, activity_id, inbox, host, attempted_at, status_code, outcome, duration_ms)
				%s SELECT %s, printf('https://local.example/activities/%%d', i / 100), 'https://' || %s || '/inbox', %s, %d, 202, 'delivered', 40 FROM seq`,
				seq(done), evID, host, host, old),
		)
	}
	open := func(n, offset int, status, extra string) string {
		return fmt.Sprintf(`INSERT INTO event_queue (event_id, type, target, payload, status, attempts, next_attempt_at, claimed_at, last_error, occurred_at, created_at, updated_at)
			%s SELECT printf('00000000-0000-4000-9000-%%012d', i + %d), 'delivery.post', %s, '{}', '%s', %s, %d, %d, %d FROM seq`,
			seq(n), offset, host, status, extra, now, now, now)
	}
	stmts = append(stmts,
		open(scalePending, 0, "pending", fmt.Sprintf("0, %d, NULL, NULL", now)),
		open(scaleDead, scalePending, "dead_lettered", fmt.Sprintf("10, %d, NULL, 'HTTP 410 Gone'", now)),
		open(scaleProcessing, scalePending+scaleDead, "processing", fmt.Sprintf("1, %d, %d, NULL", now, now)),
		`PRAGMA synchronous = FULL`,
	)
	for _, s := range stmts {
		if _, err := db.Write.ExecContext(ctx, s); err != nil {
			b.Fatalf("fill: %v\n%s", err, s)
		}
	}
}

// BenchmarkOpsAtScale measures what an operator's tools read, through the
// real process on its operators' listener at the production settings
// (synchronous=FULL, the default read pool): a /metrics scrape,
// `admin stats`, `admin hosts` (a page of 100 hosts) and `admin events
// --status pending` and the console's overview and hosts pages, each at 0,
// 1 M and 10 M done delivery rows with their
// ledger rows, delivery targets and attempts. ns/op of the same query at
// each size is the figure; GET /healthz on the same listener, reported as
// healthz-ns/op, is the machine's floor for one request.
//
//	go test ./cmd/courier -run '^$' -bench BenchmarkOpsAtScale -benchtime 20x
//
// It is about the SQLite file (its history is filled with SQLite's
// recursive CTEs and printf, at synchronous=OFF) and skips with
// COURIER_TEST_STORE=postgres.
func BenchmarkOpsAtScale(b *testing.B) {
	if storetest.Dialect() != sqldb.SQLite {
		b.Skip("BenchmarkOpsAtScale fills a SQLite file: SQLite only")
	}
	for _, done := range scaleSizes(b) {
		b.Run(fmt.Sprintf("done=%d", done), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "courier.db")
			start := time.Now()
			fillHistory(b, path, done)
			b.Logf("filled %d done rows (and their ledger, targets and attempts) in %s", done, time.Since(start).Round(time.Second))
			cfg := defaultConfig()
			cfg.DB = path
			cfg.Listen = "127.0.0.1:0"
			cfg.OpsListen = "127.0.0.1:0"
			cfg.Worker = false
			cfg.AdminToken = "d94e2a7c05b1f3869e0a4c7b21f5d8e3a6c0"
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a, err := newApp(ctx, cfg, slog.New(slog.DiscardHandler), true)
			if err != nil {
				b.Fatal(err)
			}
			runDone := make(chan error, 1)
			go func() { runDone <- a.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-runDone; err != nil {
					b.Errorf("run: %v", err)
				}
			}()
			ops := "http://" + a.opsListener.Addr().String()
			// The console's session: signed in once.
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			login, err := noFollow.PostForm(ops+"/console/login", url.Values{"token": {cfg.AdminToken}})
			if err != nil {
				b.Fatal(err)
			}
			login.Body.Close()
			if len(login.Cookies()) != 1 {
				b.Fatalf("console sign-in: %d, cookies %v", login.StatusCode, login.Cookies())
			}
			session := login.Cookies()[0]
			fetch := func(b *testing.B, path string) {
				req, _ := http.NewRequest(http.MethodGet, ops+path, nil)
				req.Header.Set("Authorization", "Bearer "+cfg.AdminToken)
				req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
				}
				if path == "/console/" && !strings.Contains(string(body), `id="dead-total">1000<`) {
					b.Fatalf("the console's overview does not show the 1000 dead letters:\n%s", body)
				}
				if path == "/metrics" && !strings.Contains(string(body), `courier_stats_up{source="queue"} 1`) {
					b.Fatalf("the scrape's queue query failed:\n%s", body)
				}
			}
			for _, c := range []struct{ name, path string }{
				{"healthz", "/healthz"},
				{"scrape", "/metrics"},
				{"admin-stats", "/admin/stats"},
				{"admin-hosts", "/admin/hosts?limit=100"},
				{"admin-events-pending", "/admin/events?status=pending"},
				{"admin-events-dead", "/admin/events?status=dead_lettered&host=h003.example"},
				{"console-overview", "/console/"},
				{"console-hosts", "/console/hosts"},
			} {
				b.Run(c.name, func(b *testing.B) {
					fetch(b, c.path) // warm the page cache and the statements
					b.ResetTimer()
					for b.Loop() {
						fetch(b, c.path)
					}
				})
			}
		})
	}
}
