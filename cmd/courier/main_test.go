package main

import (
	"bytes"
	"context"
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
		{"unknown flag", []string{"serve", "--colour"}, nil, 2, "flag provided but not defined"},
		{"no streams", []string{"serve", "--streams-max", "0"}, nil, 2, "invalid --streams-max 0"},
		{"no streams per actor", []string{"serve"}, map[string]string{"COURIER_STREAMS_PER_ACTOR": "0"}, 2, "--streams-per-actor 0"},
		{"keep-alive too short", []string{"serve", "--stream-keep-alive", "10ms"}, nil, 2, "invalid --stream-keep-alive 10ms: must be at least 1s"},
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
		})
	}
}

// --nats-url is checked as the bus checks it: server lists and bare
// host:port pass, and a refused URL's password is never repeated.
func TestNATSURLChecks(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Bus = "nats"
	for _, ok := range []string{"nats://a.example:4222,nats://b.example:4222", "127.0.0.1:4222", "tls://u:p@nats.example"} {
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
