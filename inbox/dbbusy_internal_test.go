package inbox

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// TestDatabaseBusyDefers: a database that cannot take the work now
// (SQLite's SQLITE_BUSY with another writer holding the lock; PostgreSQL's
// lock timeout behind an exclusive lock) defers the request, 503 with
// Retry-After, not a 500 or a final status.
func TestDatabaseBusyDefers(t *testing.T) {
	loc := storetest.Location(t)
	a := storetest.Open(t, loc, storetest.Options{})
	b := storetest.Open(t, loc, storetest.Options{})
	ctx := context.Background()
	holder, err := a.Write.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := b.Write.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pg := strings.HasPrefix(loc, "postgres")
	var stmts []string
	if pg {
		stmts = []string{"BEGIN", "LOCK TABLE actors IN ACCESS EXCLUSIVE MODE"}
	} else {
		stmts = []string{"BEGIN IMMEDIATE"}
	}
	for _, q := range stmts {
		if _, err := holder.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer func() { _, _ = holder.ExecContext(ctx, "ROLLBACK") }()
	if pg {
		_, err = other.ExecContext(ctx, "SET lock_timeout = '20ms'")
	} else {
		_, err = other.ExecContext(ctx, "PRAGMA busy_timeout = 0")
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.ExecContext(ctx, "DELETE FROM actors WHERE id = -1")
	if err == nil {
		t.Fatal("a write beside a held lock succeeded")
	}
	d := deferral(err)
	if d == nil || d.Reason != metrics.InboxDeferredDatabaseBusy || d.Wait <= 0 {
		t.Fatalf("deferral(%v) = %+v, want database_busy", err, d)
	}
	if status, result := classify(err); status != http.StatusServiceUnavailable || result != resultDeferred {
		t.Fatalf("classify(%v) = %d %s, want 503 deferred", err, status, result)
	}
}
