package postgres_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestIsURL(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"postgres://u@h/db": true, "postgresql://h/db": true, "POSTGRES://h/db": true,
		"courier.db": false, "/var/lib/courier/courier.db": false, "file:courier.db": false, "": false,
	} {
		if got := postgres.IsURL(s); got != want {
			t.Errorf("IsURL(%q) = %v, want %v", s, got, want)
		}
	}
}

// Open answers a real server, refuses a malformed URL with ErrURL, and never
// repeats a password in its errors.
func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.DSN(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := db.Write.QueryRow(`SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
	db.Close()
	if _, err := postgres.Open(ctx, "postgres://u:hunter2@[::1", postgres.Options{}); !errors.Is(err, postgres.ErrURL) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("malformed URL: %v; want ErrURL without the password", err)
	}
	// Port 1 on loopback: nothing listens there.
	_, err = postgres.Open(ctx, "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", postgres.Options{})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "xxxxx") {
		t.Fatalf("unreachable: %v; want an error naming the redacted URL", err)
	}
}
