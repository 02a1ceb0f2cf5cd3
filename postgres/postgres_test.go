package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

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

// An enqueue committed by one process wakes the OnWrite hooks of another
// that listens, including the last of a burst inside the debounce window
// (announced after its commit, not lost); bools are stored as 0/1.
func TestEnqueueWakesListeners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	writer, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	listener, err := postgres.Open(ctx, dsn, postgres.Options{Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	woke := make(chan struct{}, 1024)
	listener.OnWrite(func() {
		select {
		case woke <- struct{}{}:
		default:
		}
	})
	if _, err := writer.Write.Exec(`CREATE TABLE event_queue (id BIGINT, flag INTEGER)`); err != nil {
		t.Fatal(err)
	}
	// The listener announces itself once when it has connected.
	waitWake(t, woke, "the listener connecting")
	// A reader woken only by announcements sees every committed row: the
	// commits debounced inside a window are announced after it.
	total := 0
	for round := 0; round < 3; round++ {
		for i := 0; i < 20; i++ {
			err := writer.Tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT INTO event_queue (id, flag) VALUES (?, ?)`, i, i%2 == 0)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		total += 20
		for seen := 0; seen < total; {
			waitWake(t, woke, fmt.Sprintf("round %d: the reader has seen %d of %d rows", round, seen, total))
			if err := listener.Read.QueryRow(`SELECT COUNT(*) FROM event_queue`).Scan(&seen); err != nil {
				t.Fatal(err)
			}
		}
		var n int
		if err := writer.Write.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE flag = 1`).Scan(&n); err != nil || n != total/2 {
			t.Fatalf("round %d: %d rows flagged, %v; want %d", round, n, err, total/2)
		}
	}
}

func waitWake(t *testing.T, woke chan struct{}, what string) {
	t.Helper()
	select {
	case <-woke:
	case <-time.After(30 * time.Second):
		t.Fatalf("no wake-up after %s", what)
	}
}

// Redact hides the userinfo password and the password and sslpassword query
// parameters pgx reads, whatever their spelling, and keeps the rest.
func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:hunter2@h/db":                                      "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=hunter2":                             "postgres://u@h/db?password=xxxxx",
		"postgres://u@h/db?sslmode=verify-full&sslpassword=hunter2":      "postgres://u@h/db?sslmode=verify-full&sslpassword=xxxxx",
		"postgres://u@h/db?PassWord=hunter2&sslmode=disable":             "postgres://u@h/db?PassWord=xxxxx&sslmode=disable",
		"postgres://u@h/db?pass%77ord=hunter2":                           "postgres://u@h/db?password=xxxxx",
		"postgres://u@h/db?password=hunter2&password=hunter2":            "postgres://u@h/db?password=xxxxx&password=xxxxx",
		"postgresql://u:a@h:5433/db?application_name=x&password=hunter2": "postgresql://u:xxxxx@h:5433/db?application_name=x&password=xxxxx",
		"postgres://u@h/db?password=hunter2#hunter2":                     "postgres://u@h/db?password=xxxxx#xxxxx",
		"postgres://u@h/db":                                              "postgres://u@h/db",
		"postgres://u:hunter2@[::1":                                      "(unparsable URL)",
	} {
		if got := postgres.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		if has := postgres.HasPassword(in); has != strings.Contains(in, "hunter2") {
			t.Errorf("HasPassword(%q) = %v", in, has)
		}
	}
}

// A wrong password, given as a query parameter, is refused by the server;
// the error names the database without repeating the password. The server
// is a loopback listener speaking PostgreSQL's protocol that asks for a
// cleartext password and refuses it as PostgreSQL does (28P01), so the test
// also sees that the password was sent.
func TestOpenWrongPasswordRedacted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go refusePassword(c, got)
		}
	}()
	ctx := context.Background()
	for _, param := range []string{"password", "sslpassword"} {
		dsn := fmt.Sprintf("postgres://ana@%s/db?sslmode=disable&%s=hunter2", ln.Addr(), param)
		if param == "sslpassword" {
			dsn = fmt.Sprintf("postgres://ana:hunter2@%s/db?sslmode=disable&sslpassword=hunter2", ln.Addr())
		}
		_, err := postgres.Open(ctx, dsn, postgres.Options{ConnectTimeout: time.Minute})
		if err == nil {
			t.Fatalf("%s: opened with a wrong password", param)
		}
		if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "xxxxx") || !strings.Contains(err.Error(), "password authentication failed") {
			t.Errorf("%s: error %q; want the server's refusal naming the redacted URL", param, err)
		}
		select {
		case p := <-got:
			if p != "hunter2" {
				t.Errorf("%s: the server received password %q", param, p)
			}
		default:
			t.Errorf("%s: the server received no password", param)
		}
	}
}

func refusePassword(c net.Conn, got chan<- string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	be := pgproto3.NewBackend(c, c)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.SSLRequest); ok {
		if _, err := c.Write([]byte{'N'}); err != nil {
			return
		}
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if err := be.Flush(); err != nil {
		return
	}
	if err := be.SetAuthType(pgproto3.AuthTypeCleartextPassword); err != nil {
		return
	}
	msg, err = be.Receive()
	if err != nil {
		return
	}
	if pw, ok := msg.(*pgproto3.PasswordMessage); ok {
		got <- pw.Password
	}
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "ana"`})
	_ = be.Flush()
}
