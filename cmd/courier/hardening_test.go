package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/store"
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

// TestInboundBudgetSettingAndView: COURIER_INBOX_HOST_REQUESTS sets each
// remote host's budget; a host beyond it gets 429, and /admin/inbound and
// `courier admin inbound` show it throttled with its budget; an activity
// that concerns no one here is counted there as ignored.
func TestInboundBudgetSettingAndView(t *testing.T) {
	t.Parallel()
	const tok = "0123456789abcdef0123456789abcdef"
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	remote := newRemoteHost(t, key, http.StatusAccepted)
	getenv := func(k string) string {
		return map[string]string{"COURIER_INBOX_HOST_REQUESTS": "3", "COURIER_INBOX_HOST_BUDGETS": "other.example=2"}[k]
	}
	cfg, _, err := parseConfig("serve", nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	a, logs := startApp(t, func(c *Config) {
		c.AllowPrivateAddresses, c.AdminToken = true, tok
		c.InboxHostRequests, c.InboxHostBudgets = cfg.InboxHostRequests, cfg.InboxHostBudgets
	})
	alice, _, err := a.store.CreateActor(context.Background(), store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	base := a.cfg.BaseURL
	act := func(n int, object string) map[string]any {
		return map[string]any{"@context": activitypub.ActivityStreams, "id": fmt.Sprintf("%s/a/%d", remote.srv.URL, n),
			"type": "Follow", "actor": remote.actorID(), "object": object}
	}
	// One that concerns no one here (a Follow of another server's actor),
	// two Follows of alice, then one over the budget of 3.
	statuses := []int{
		remote.post(t, base+"/inbox", act(0, "https://elsewhere.example/users/x")),
		remote.post(t, base+"/inbox", act(1, alice.URI)),
		remote.post(t, base+"/inbox", act(2, alice.URI)),
		remote.post(t, base+"/inbox", act(3, alice.URI)),
	}
	if want := []int{202, 202, 202, 429}; !slices.Equal(statuses, want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
	if !strings.Contains(logs.String(), "over its inbound budget") {
		t.Errorf("no warning about the throttled host:\n%s", logs.String())
	}

	req, _ := http.NewRequest(http.MethodGet, base+"/admin/inbound", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var view admin.InboundHosts
	err = json.NewDecoder(r.Body).Decode(&view)
	r.Body.Close()
	host := strings.TrimPrefix(remote.srv.URL, "http://")
	if err != nil || view.RequestsPerMinute != 3 || len(view.Hosts) != 1 {
		t.Fatalf("/admin/inbound: %+v %v", view, err)
	}
	if h := view.Hosts[0]; h.Host != host || h.Requests != 3 || h.Ignored != 1 || h.Throttled != 1 || h.RequestsPerMinute != 3 {
		t.Fatalf("/admin/inbound host %+v", h)
	}
	var out, errOut bytes.Buffer
	env := map[string]string{"COURIER_ADMIN_TOKEN": tok}
	if code := admin.Command(context.Background(), []string{"--server", base, "inbound"}, &out, &errOut, func(k string) string { return env[k] }); code != 0 {
		t.Fatalf("courier admin inbound: exit %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "3 requests") || !strings.Contains(out.String(), host) {
		t.Fatalf("courier admin inbound:\n%s", out.String())
	}
}

// TestInboundBudgetSettingsChecked: bad budget settings end the process
// with one line naming the setting.
func TestInboundBudgetSettingsChecked(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]string{
		"COURIER_INBOX_HOST_REQUESTS=0":          "--inbox-host-requests",
		"COURIER_INBOX_HOST_BYTES=1000":          "must be at least 1048576",
		"COURIER_INBOX_HOST_BUDGETS=big.example": "want host=factor",
		"COURIER_INBOX_HOST_BUDGETS=a.example=0": "want host=factor",
	} {
		k, v, _ := strings.Cut(env, "=")
		_, _, err := parseConfig("serve", nil, func(name string) string {
			if name == k {
				return v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", env, err, want)
		}
	}
}
