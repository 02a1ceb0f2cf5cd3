package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/courier-ap/courier/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// courier migrate brings a real PostgreSQL database to the latest schema
// version, twice without change; the commands that do not run on
// PostgreSQL yet refuse its URL with one line instead of taking it for a
// SQLite file name.
func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	env := func(string) string { return "" }
	for i, want := range []string{"applied now)", "(0 applied now)"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"migrate", "--db", dsn}, &out, &errb, env); code != 0 {
			t.Fatalf("migrate %d: exit %d, stderr %q", i, code, errb.String())
		}
		if !strings.Contains(out.String(), "at schema version") || !strings.Contains(out.String(), want) {
			t.Fatalf("migrate %d: stdout %q, want %q", i, out.String(), want)
		}
	}
	for _, args := range [][]string{{"serve", "--db", dsn}, {"worker", "--db", dsn}, {"actor", "create", "alice", "--db", dsn}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb, env)
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], "PostgreSQL URL") {
			t.Fatalf("%v: exit %d, stderr %q; want a failure and one line about the PostgreSQL URL", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	bad := strings.Replace(dsn, "courier@", "courier:secret@", 1)
	bad = strings.Replace(bad, "127.0.0.1:", "127.0.0.1:1", 1) // a port nothing listens on
	if code := run(context.Background(), []string{"migrate", "--db", bad}, &out, &errb, env); code != 1 || strings.Contains(errb.String(), "secret") {
		t.Fatalf("unreachable: exit %d, stderr %q; want exit 1 and no password", code, errb.String())
	}
}
