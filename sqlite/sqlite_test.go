package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqlite"
)

// TestOpenWaitsForALockedNewFile opens a new file while another connection
// holds its lock, as a second process starting at the same instant does:
// Open waits for the lock instead of failing with "database is locked".
func TestOpenWaitsForALockedNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "courier.db")
	other, err := sql.Open(sqlite.DriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxOpenConns(1)
	ctx := context.Background()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "CREATE TABLE held (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = tx.Commit()
		close(released)
	}()
	db, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: 10 * time.Second})
	<-released
	if err != nil {
		t.Fatalf("open while another connection held the lock: %v", err)
	}
	defer db.Close()
	var n int
	if err := db.Read.QueryRowContext(ctx, "SELECT count(*) FROM held").Scan(&n); err != nil {
		t.Fatal(err)
	}
}
