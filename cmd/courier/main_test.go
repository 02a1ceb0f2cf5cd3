package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-ap/courier/sqldb/storetest"
)

// Bad settings and broken databases end the process with a non-zero status
// and exactly one line on stderr: no panic, no stack trace. The broken
// databases here are SQLite files as such (missing, unwritable, corrupt)
// and stay SQLite on both stores' runs; store_test.go has PostgreSQL's.
func TestBadInputExitsWithOneLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.db")
	if err := os.WriteFile(corrupt, bytes.Repeat([]byte("not a database "), 400), 0o600); err != nil {
		t.Fatal(err)
	}
	readonlyDir := filepath.Join(dir, "ro")
	if err := os.Mkdir(readonlyDir, 0o500); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.db")
	cases := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"max attempts not a number", []string{"serve"}, map[string]string{"EVENT_QUEUE_MAX_ATTEMPTS": "abc"}, 2, `invalid EVENT_QUEUE_MAX_ATTEMPTS="abc"`},
		{"max attempts zero", []string{"serve", "--db", good}, map[string]string{"EVENT_QUEUE_MAX_ATTEMPTS": "0"}, 2, "must be at least 1"},
		{"max attempts flag", []string{"worker", "--max-attempts=-3"}, nil, 2, "must be at least 1"},
		{"unknown bus", []string{"serve"}, map[string]string{"EVENT_BUS_BACKEND": "kafka"}, 2, `want db or nats`},
		{"unknown nats mode", []string{"worker", "--bus", "nats", "--nats-mode", "fast"}, nil, 2, "want jetstream or core"},
		{"bad nats url", []string{"worker", "--bus", "nats", "--nats-url", "http://x"}, nil, 2, "want nats://host:port"},
		{"bad base url", []string{"serve", "--base-url", "example.org"}, nil, 2, "--base-url"},
		{"bad listen", []string{"serve", "--listen", "8080"}, nil, 2, "want host:port"},
		{"bad ops listen", []string{"worker", "--ops-listen", "9464"}, nil, 2, "invalid --ops-listen"},
		{"bad bool", []string{"serve"}, map[string]string{"COURIER_ALLOW_PRIVATE_ADDRESSES": "maybe"}, 2, "not true or false"},
		{"short admin token", []string{"serve"}, map[string]string{"COURIER_ADMIN_TOKEN": "admin"}, 2, "COURIER_ADMIN_TOKEN): 5 characters, at least 32 needed; make one with: openssl rand -hex 32"},
		{"delete an unknown actor", []string{"actor", "delete", "--db", storetest.Location(t), "nobody"}, nil, 1, `no actor "nobody"`},
		{"delete without a name", []string{"actor", "delete"}, nil, 2, "courier actor delete NAME"},
		{"31-character admin token", []string{"worker", "--admin-token", strings.Repeat("k", 31)}, nil, 2, "at least 32 needed"},
		{"repeated admin token", []string{"serve"}, map[string]string{"COURIER_ADMIN_TOKEN": strings.Repeat("changeme", 4)}, 2, "only 7 distinct characters"},
		{"repeated hex admin token", []string{"worker", "--admin-token", strings.Repeat("0123456789abcdef", 2)}, nil, 2, "a piece of 16 characters repeated"},
		{"sequence admin token", []string{"serve"}, map[string]string{"COURIER_ADMIN_TOKEN": "abcdefghijklmnopqrstuvwxyz012345"}, 2, "bits of entropy, at least 64 needed"},
		{"word admin token", []string{"serve"}, map[string]string{"COURIER_ADMIN_TOKEN": "passwordpassword1234567890123456"}, 2, "bits of entropy, at least 64 needed"},
		{"listen port out of range", []string{"serve", "--listen", "127.0.0.1:99999"}, nil, 2, `invalid --listen (COURIER_LISTEN) "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`},
		{"listen port a name", []string{"serve"}, map[string]string{"COURIER_LISTEN": ":x"}, 2, `invalid --listen (COURIER_LISTEN) ":x": port "x"`},
		{"listen port empty", []string{"serve", "--listen", "127.0.0.1:"}, nil, 2, `port ""`},
		{"listen host", []string{"serve", "--listen", "exa mple:80"}, nil, 2, "neither an IP address nor a host name"},
		{"ops listen port out of range", []string{"worker", "--ops-listen", "127.0.0.1:70000"}, nil, 2, `invalid --ops-listen "127.0.0.1:70000": port "70000"`},
		{"nats url of colons", []string{"worker", "--bus", "nats"}, map[string]string{"NATS_URL": "::::"}, 2, "invalid --nats-url (NATS_URL)"},
		{"nats url second server", []string{"worker", "--bus", "nats", "--nats-url", "nats://a.example:4222,nats://u:pw@b_c!d:4222"}, nil, 2, "server 2"},
		{"keyword/value database string", []string{"migrate"}, map[string]string{"COURIER_DB": "host=db.example user=courier password=hunter2 dbname=courier"}, 2, "keyword/value string"},
		{"unknown flag", []string{"serve", "--colour"}, nil, 2, "flag provided but not defined"},
		{"no streams", []string{"serve", "--streams-max", "0"}, nil, 2, "invalid --streams-max 0"},
		{"no streams per actor", []string{"serve"}, map[string]string{"COURIER_STREAMS_PER_ACTOR": "0"}, 2, "--streams-per-actor 0"},
		{"keep-alive too short", []string{"serve", "--stream-keep-alive", "10ms"}, nil, 2, "invalid --stream-keep-alive 10ms: must be at least 1s"},
		{"webhook address not an address", []string{"serve", "--webhook-allow-addresses", "169.254.169.254,metadata"}, nil, 2, `invalid --webhook-allow-addresses (COURIER_WEBHOOK_ALLOW_ADDRESSES) entry "metadata"`},
		{"unknown command", []string{"fly"}, nil, 2, `unknown command "fly"`},
		{"missing directory", []string{"migrate", "--db", filepath.Join(dir, "no", "such", "c.db")}, nil, 1, "no such file or directory"},
		{"unwritable directory", []string{"migrate", "--db", filepath.Join(readonlyDir, "c.db")}, nil, 1, "sqlite:"},
		{"unwritable file system", []string{"migrate", "--db", "/proc/courier.db"}, nil, 1, "unable to open database file"},
		{"path is a directory", []string{"migrate", "--db", dir}, nil, 1, "unable to open database file"},
		{"corrupt database", []string{"migrate", "--db", corrupt}, nil, 1, "not a database"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.name == "unwritable directory" && os.Geteuid() == 0 {
				t.Skip("root writes into a read-only directory")
			}
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string { return c.env[k] }
			code := run(context.Background(), c.args, &stdout, &stderr, getenv)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, c.code, stderr.String())
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "courier: ") || !strings.Contains(lines[0], c.want) {
				t.Fatalf("stderr %q: want one line starting courier: and containing %q", stderr.String(), c.want)
			}
			if strings.Contains(stderr.String(), "hunter2") {
				t.Fatalf("stderr %q repeats the password", stderr.String())
			}
		})
	}
}

// --nats-url is checked as the bus checks it: server lists and bare
// host:port pass, and a refused URL's password is never repeated.
func TestNATSURLChecks(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Bus = "nats"
	for _, ok := range []string{"nats://a.example:4222,nats://b.example:4222", "127.0.0.1:4222", "tls://u:p@nats.example", "nats://[::1]:4222", "nats_1:4222"} {
		cfg.NATSURL = ok
		if err := cfg.validate(); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	cfg.NATSURL = "http://user:s3cret@nats.example"
	err := cfg.validate()
	if err == nil || !strings.Contains(err.Error(), "--nats-url") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("validate = %v: want a --nats-url error without the password", err)
	}
}

// A token from openssl rand passes the strength check, whatever its
// alphabet; a typed one that repeats, runs or has few characters does not.
func TestAdminTokenStrength(t *testing.T) {
	t.Parallel()
	for i := 0; i < 200; i++ {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{hex.EncodeToString(b), base64.RawURLEncoding.EncodeToString(append(b, b[:8]...))} {
			if err := checkTokenStrength(tok); err != nil {
				t.Fatalf("random token %q refused: %v", tok, err)
			}
		}
	}
	for _, weak := range []string{
		strings.Repeat("changeme", 4), strings.Repeat("k", 40), strings.Repeat("ab", 20), "adminadminadminadminadminadmin12",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", "0123456789012345678901234567890123", "zyxwvutsrqponmlkjihgfedcba987654",
	} {
		if err := checkTokenStrength(weak); err == nil {
			t.Errorf("weak token %q accepted", weak)
		}
	}
}
