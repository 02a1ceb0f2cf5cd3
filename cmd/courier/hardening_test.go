package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/courier-ap/courier/admin"
)

// lockedBuffer is a log destination safe for the app's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startApp runs a server with an embedded worker on a fresh database and
// a free loopback port, with cfg adjusted by mutate; it is stopped and
// awaited when the test ends.
func startApp(t *testing.T, mutate func(*Config)) (*app, *lockedBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := defaultConfig()
	cfg.DB = filepath.Join(t.TempDir(), "courier.db")
	cfg.Synchronous = "NORMAL"
	cfg.Listen = addr
	cfg.BaseURL = "http://" + addr
	mutate(&cfg)
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newApp(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), true)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	waitFor(t, "the server to answer", func() bool {
		r, err := http.Get(cfg.BaseURL + "/healthz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return true
	})
	return a, logs
}

// TestAllowPrivateAddressesIsShown: with COURIER_ALLOW_PRIVATE_ADDRESSES
// the start logs a warning, /readyz reports it in its details, and
// /admin/stats and `courier admin stats` show it; without, none of them.
func TestAllowPrivateAddressesIsShown(t *testing.T) {
	t.Parallel()
	const tok = "0123456789abcdef0123456789abcdef"
	for _, allow := range []bool{true, false} {
		a, logs := startApp(t, func(c *Config) { c.AllowPrivateAddresses = allow; c.AdminToken = tok })
		base := a.cfg.BaseURL

		warned := strings.Contains(logs.String(), "level=WARN msg=\"COURIER_ALLOW_PRIVATE_ADDRESSES is on")
		if warned != allow {
			t.Errorf("allow=%v: start warning logged=%v\n%s", allow, warned, logs.String())
		}

		r, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var ready struct {
			Details map[string]any `json:"details"`
		}
		err = json.NewDecoder(r.Body).Decode(&ready)
		r.Body.Close()
		if err != nil || ready.Details["allow_private_addresses"] != allow {
			t.Errorf("allow=%v: /readyz details %v (%v)", allow, ready.Details, err)
		}

		req, _ := http.NewRequest(http.MethodGet, base+"/admin/stats", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		r, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var stats admin.Stats
		err = json.NewDecoder(r.Body).Decode(&stats)
		r.Body.Close()
		if err != nil || stats.AllowPrivateAddresses != allow {
			t.Errorf("allow=%v: /admin/stats says %v (%v)", allow, stats.AllowPrivateAddresses, err)
		}

		var out, errOut bytes.Buffer
		env := map[string]string{"COURIER_ADMIN_TOKEN": tok}
		code := admin.Command(context.Background(), []string{"--server", base, "stats"}, &out, &errOut, func(k string) string { return env[k] })
		shown := strings.Contains(out.String(), "warning: COURIER_ALLOW_PRIVATE_ADDRESSES=true")
		if code != 0 || shown != allow {
			t.Errorf("allow=%v: courier admin stats exit %d, warning shown=%v\n%s%s", allow, code, shown, out.String(), errOut.String())
		}
	}
}
