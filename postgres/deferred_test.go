package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/postgres/pgtest"
	"github.com/courier-ap/courier/sqldb"
)

// A transaction's deferred statements (sqldb.Deferred) are held until its
// next round trip and then run in order before it: a held insert blocks on
// nothing, a later query or prepared statement of the transaction sees it,
// a later Exec runs after it, the commit carries it, a rollback drops it.
// A held statement that fails fails the statement that sent it, or the
// commit, and nothing of the transaction stays; the connection serves the
// next transaction. Outside a transaction it runs at once.
func TestDeferredStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := db.Write.Exec(`CREATE TABLE d (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	value := func(id int) string {
		t.Helper()
		var v string
		err := db.Read.QueryRow(`SELECT v FROM d WHERE id = ?`, id).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return "(none)"
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	insert := sqldb.Deferred + `INSERT INTO d (id, v) VALUES (?, ?)`

	// Another transaction holds key 1 uncommitted: an insert of it sent to
	// the server would wait for that transaction. The held one returns.
	lock, err := other.Write.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(`INSERT INTO d (id, v) VALUES (1, 'other')`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Write.Begin()
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := tx.ExecContext(hctx, insert, 1, "held")
	cancel()
	if err != nil {
		t.Fatalf("held insert: %v", err)
	}
	if _, err := res.RowsAffected(); err == nil {
		t.Fatal("a held statement's result answered RowsAffected")
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Order: a query sees the held insert; an Exec runs after the held
	// update; a prepared statement's execution after a held insert sees it.
	if _, err := tx.Exec(insert, 2, "b"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM d`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the transaction's query counts %d rows (%v), want its 2 held inserts", n, err)
	}
	if _, err := tx.Exec(sqldb.Deferred + `UPDATE d SET v = 'c' WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	r, err := tx.Exec(`UPDATE d SET v = v || 'd' WHERE id = 2`)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("the Exec sent with held statements: %d rows affected, %v", n, err)
	}
	st, err := tx.Prepare(`SELECT v FROM d WHERE id = ?`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(insert, 3, "e"); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := st.QueryRow(3).Scan(&v); err != nil || v != "e" {
		t.Fatalf("prepared statement after a held insert: %q, %v", v, err)
	}
	if _, err := tx.Exec(insert, 4, "at commit"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int]string{1: "held", 2: "cd", 3: "e", 4: "at commit"} {
		if got := value(id); got != want {
			t.Errorf("row %d = %q, want %q", id, got, want)
		}
	}

	// A rollback drops what is held.
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(insert, 5, "rolled back"); err != nil {
			return err
		}
		return errors.New("changed my mind")
	})
	if err == nil || value(5) != "(none)" {
		t.Fatalf("rolled back: %v, row 5 %q", err, value(5))
	}

	// A held insert that fails fails the commit; the transaction's other
	// write is gone with it.
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO d (id, v) VALUES (6, 'lost')`); err != nil {
			return err
		}
		_, err := tx.Exec(insert, 1, "duplicate")
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(err.Error(), "deferred statement") {
		t.Fatalf("commit of a failing held insert: %v; want its unique violation", err)
	}
	if value(6) != "(none)" || value(1) != "held" {
		t.Fatalf("after the failed commit: row 6 %q, row 1 %q", value(6), value(1))
	}
	// ... and fails the next statement that sends it.
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(insert, 1, "duplicate"); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO d (id, v) VALUES (7, 'lost')`)
		return err
	})
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || value(7) != "(none)" {
		t.Fatalf("an Exec after a failing held insert: %v, row 7 %q", err, value(7))
	}

	// Outside a transaction a deferred statement runs at once.
	r, err = db.Write.Exec(insert, 8, "at once")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 || value(8) != "at once" {
		t.Fatalf("outside a transaction: %d rows, %v, row 8 %q", n, err, value(8))
	}
}
