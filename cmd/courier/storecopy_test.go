package main

import (
	"bytes"
	"context"
	"github.com/courier-ap/courier/internal/testnet"
	"github.com/courier-ap/courier/store/notetest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-ap/courier/postgres/pgtest"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/storecopy"
)

// courier store copy moves a SQLite instance into PostgreSQL: exit 0, one
// plain line per table on a stderr that is not a terminal, the summary on
// stdout; the actor copied authenticates on PostgreSQL with its token.
// A second run resumes into the same database and writes nothing.
func TestStoreCopyCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "courier.db")
	src := storetest.Open(t, path, storetest.Options{})
	s := store.New(src, "https://courier.example", nil)
	alice, token, err := s.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := notetest.Create(ctx, s, alice, notetest.Input{Content: "hello", To: []string{"https://www.w3.org/ns/activitystreams#Public"}}); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dsn := pgtest.DSN(t)
	env := func(string) string { return "" }
	for i, want := range []string{"rows (", "(0 written by this run)"} {
		var out, errb bytes.Buffer
		code := run(ctx, []string{"store", "copy", "--from", path, "--to", dsn, "--batch", "2"}, &out, &errb, env)
		if code != 0 {
			t.Fatalf("run %d: exit %d, stderr %q", i, code, errb.String())
		}
		if !strings.Contains(out.String(), "row counts and checksums match") || !strings.Contains(out.String(), want) {
			t.Fatalf("run %d: stdout %q", i, out.String())
		}
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		if len(lines) < 20 || !strings.HasPrefix(lines[0], "store copy: [ 1/") || !strings.Contains(errb.String(), "actors") || strings.Contains(errb.String(), "\r") {
			t.Fatalf("run %d: stderr %q, want one plain line per table", i, errb.String())
		}
	}
	dst := storetest.Open(t, dsn, storetest.Options{})
	got, err := store.New(dst, "https://courier.example", nil).Authenticate(ctx, "alice", token)
	if err != nil || got.ID != alice.ID || got.PublicKeyPEM != alice.PublicKeyPEM {
		t.Fatalf("alice on PostgreSQL: %+v, %v", got, err)
	}
}

// Bad input: exit 2 and one line naming what is wrong; an unreachable
// target exit 1 and one line.
func TestStoreCopyBadInput(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "courier.db")
	storetest.Open(t, path, storetest.Options{}).Close()
	// A port nothing listens on, held so while the test runs.
	closed := testnet.Refusing(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"store"}, 2, "store copy"},
		{[]string{"store", "copy", "--to", "postgres://u@127.0.0.1/db"}, 2, "--from is missing"},
		{[]string{"store", "copy", "--from", path}, 2, "--to is missing"},
		{[]string{"store", "copy", "--from", filepath.Join(t.TempDir(), "none.db"), "--to", "postgres://u@127.0.0.1/db"}, 2, "no such file"},
		{[]string{"store", "copy", "--from", path, "--to", "/var/lib/other.db"}, 2, "not a postgres:// URL"},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://u:secret@127.0.0.1:notaport/db"}, 2, "bad database URL"},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://u@127.0.0.1/db", "--batch", "0"}, 2, "--batch"},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://u@127.0.0.1/db", "extra"}, 2, "unexpected argument"},
		{[]string{"store", "copy", "--from", path, "--to", "postgres://u@" + closed + "/db?connect_timeout=5"}, 1, "connect to"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb, func(string) string { return "" })
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		if code != c.code || len(lines) != 1 || !strings.Contains(lines[0], c.want) || strings.Contains(errb.String(), "secret") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one line with %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"store", "-h"}, &out, &errb, func(string) string { return "" }); code != 0 || !strings.Contains(out.String(), "Stop every courier process") {
		t.Errorf("store -h: exit %d, stdout %q", code, out.String())
	}
}

// The progress of a copy: on a terminal one redrawn line per table; in a
// log one line per finished table and per tenth of a large one.
func TestStoreCopyProgress(t *testing.T) {
	t.Parallel()
	feed := func(b *progressBar) {
		b.report(storecopy.Progress{Table: "actors", Index: 1, Tables: 2, Done: 3, Total: 3})
		b.report(storecopy.Progress{Table: "actors", Index: 1, Tables: 2, Done: 3, Total: 3, Finished: true})
		for done := int64(500); done <= 20_000; done += 500 {
			b.report(storecopy.Progress{Table: "event_queue", Index: 2, Tables: 2, Done: done, Total: 20_000})
		}
		b.report(storecopy.Progress{Table: "event_queue", Index: 2, Tables: 2, Done: 20_000, Total: 20_000, Finished: true})
		b.report(storecopy.Progress{Table: "actors", Index: 1, Tables: 2, Verifying: true})
		b.end()
	}
	var plain bytes.Buffer
	feed(&progressBar{w: &plain})
	lines := strings.Split(strings.TrimRight(plain.String(), "\n"), "\n")
	// actors, nine tenths of event_queue, event_queue done, verifying.
	if len(lines) != 12 || !strings.Contains(lines[1], "2000 / 20000") || !strings.Contains(lines[10], "20000 / 20000") ||
		lines[11] != "store copy: verifying row counts and checksums" || strings.Contains(plain.String(), "\r") {
		t.Fatalf("plain progress:\n%s", plain.String())
	}
	var tty bytes.Buffer
	feed(&progressBar{w: &tty, tty: true})
	// Two redraws of actors, 40 batches and the end of event_queue, one of verifying.
	if n := strings.Count(tty.String(), "\r"); n != 44 || strings.Count(tty.String(), "100%") != 4 || !strings.HasSuffix(tty.String(), "\n") {
		t.Fatalf("terminal progress (%d redraws): %q", n, tty.String())
	}
}
