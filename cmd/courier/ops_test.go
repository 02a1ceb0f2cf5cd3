package main

import (
	"bytes"
	"context"
	"github.com/courier-ap/courier/internal/testnet"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// heldAddr is a loopback listener the test holds, and its address, for a
// child process (startProcessOn): the port is the test's until the child
// has it.
func heldAddr(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln := testnet.Listen(t)
	return ln, ln.Addr().String()
}

// holdAddr opens a listener on a free loopback port and gives it to cfg,
// which serves on it when Listen or OpsListen names its address: the port is
// the test's from first to last (a port closed and handed on may be taken
// by anything in between).
func holdAddr(t *testing.T, cfg *Config) string {
	t.Helper()
	ln := testnet.Listen(t)
	if cfg.listeners == nil {
		cfg.listeners = map[string]net.Listener{}
	}
	addr := ln.Addr().String()
	cfg.listeners[addr] = ln
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The operators' endpoints are on the operators' listener only; the public
// listener keeps /healthz for load balancers and nothing else of them.
func TestOperatorsListenerIsSeparate(t *testing.T) {
	t.Parallel()
	a := runApp(t, func(c *Config) {
		c.AdminToken = "6c1f0e9b57a24d83b2e47f19a0c5d836e1b9"
	})
	public := "http://" + a.listener.Addr().String()
	ops := "http://" + a.opsListener.Addr().String()
	for _, c := range []struct {
		url  string
		want int
		body string
	}{
		{public + "/healthz", http.StatusOK, ""},
		{public + "/metrics", http.StatusNotFound, ""},
		{public + "/admin/stats", http.StatusNotFound, ""},
		{public + "/readyz", http.StatusNotFound, ""},
		{public + "/console/", http.StatusNotFound, ""},
		{public + "/.well-known/nodeinfo", http.StatusOK, "nodeinfo"},
		{ops + "/healthz", http.StatusOK, ""},
		{ops + "/readyz", http.StatusOK, ""},
		{ops + "/metrics", http.StatusOK, "courier_build_info"},
		{ops + "/admin/stats", http.StatusUnauthorized, "bearer token"},
		{ops + "/.well-known/nodeinfo", http.StatusNotFound, ""},
	} {
		st, body := get(t, c.url)
		if st != c.want || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %q, want %d containing %q", c.url, st, body, c.want, c.body)
		}
	}
}

// One environment for both processes: the server takes COURIER_OPS_LISTEN,
// the worker COURIER_WORKER_OPS_LISTEN (default 127.0.0.1:9465), so they
// never ask for the same port, and the worker needs no --listen.
func TestOneEnvironmentServesServerAndWorker(t *testing.T) {
	t.Parallel()
	env := map[string]string{"COURIER_LISTEN": "127.0.0.1:8080", "COURIER_OPS_LISTEN": "127.0.0.1:9464"}
	getenv := func(k string) string { return env[k] }
	srv, _, err := parseConfig("serve", nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	wrk, _, err := parseConfig("worker", nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if srv.OpsListen != "127.0.0.1:9464" || wrk.OpsListen != DefaultWorkerOpsListen {
		t.Fatalf("ops addresses: server %s, worker %s", srv.OpsListen, wrk.OpsListen)
	}
	if got, _, _ := parseConfig("serve", nil, func(string) string { return "" }); got.OpsListen != DefaultOpsListen {
		t.Errorf("server's default ops address %s, want %s", got.OpsListen, DefaultOpsListen)
	}

	// Both processes from one environment, on free ports, side by side.
	// The ports are held by the test and handed to both processes' configs.
	held := Config{}
	env = map[string]string{
		"COURIER_DB":                 storetest.Location(t),
		"COURIER_SQLITE_SYNCHRONOUS": "NORMAL",
		"COURIER_LISTEN":             holdAddr(t, &held),
		"COURIER_OPS_LISTEN":         holdAddr(t, &held),
		"COURIER_WORKER_OPS_LISTEN":  holdAddr(t, &held),
		"COURIER_WORKER":             "false",
	}
	srv, _, err = parseConfig("serve", nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	wrk, _, err = parseConfig("worker", nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	wrk.Worker = true
	srv.listeners, wrk.listeners = held.listeners, held.listeners
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var apps []*app
	for _, p := range []struct {
		cfg       Config
		serveHTTP bool
	}{{srv, true}, {wrk, false}} {
		a, err := newApp(ctx, p.cfg, slog.New(slog.DiscardHandler), p.serveHTTP)
		if err != nil {
			t.Fatalf("start with one environment: %v", err)
		}
		apps = append(apps, a)
	}
	done := make(chan error, len(apps))
	for _, a := range apps {
		go func() { done <- a.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range apps {
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}()
	if apps[1].listener != nil {
		t.Error("the worker opened a public listener")
	}
	for _, u := range []string{"http://" + env["COURIER_OPS_LISTEN"] + "/readyz", "http://" + env["COURIER_WORKER_OPS_LISTEN"] + "/readyz",
		"http://" + env["COURIER_WORKER_OPS_LISTEN"] + "/metrics"} {
		if st, body := get(t, u); st != http.StatusOK {
			t.Errorf("GET %s: %d %s", u, st, body)
		}
	}
}

// A busy operators' address is one clear error naming the setting.
func TestOpsListenBusy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := defaultConfigFor("worker")
	cfg.DB = storetest.Location(t)
	cfg.OpsListen = ln.Addr().String()
	_, err = newApp(context.Background(), cfg, slog.New(slog.DiscardHandler), false)
	if err == nil || !strings.Contains(err.Error(), workerOpsEnv) {
		t.Fatalf("worker on a busy ops address: %v", err)
	}
}

// A fresh instance's /metrics, before any event, has every family the
// Grafana dashboard and the alert rules query (the JetStream bus's own,
// ExternalNames, aside: this instance runs the db bus), each with zeros
// for the label values courier knows.
func TestFreshInstanceHasEveryQueriedFamily(t *testing.T) {
	t.Parallel()
	a := runApp(t, nil)
	raw, fams := scrape(t, "http://"+a.opsListener.Addr().String()+"/metrics")
	referenced, err := metrics.ReferencedNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(referenced) < 20 {
		t.Fatalf("only %d names referenced", len(referenced))
	}
	scraped, err := metrics.ScrapedNames(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if missing := metrics.Unknown(referenced, append(scraped, metrics.ExternalNames...)); len(missing) > 0 {
		t.Errorf("a fresh instance's /metrics lacks %d queried families: %v", len(missing), missing)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"courier_outbox_rows", map[string]string{"status": "dead_lettered", "type": "delivery.post"}},
		{"courier_outbox_rows", map[string]string{"status": "pending", "type": "inbox.received"}},
		{"courier_delivery_hosts", map[string]string{"state": "unavailable"}},
		{"courier_delivery_attempts_total", map[string]string{"outcome": "retry", "status_class": "5xx"}},
		{"courier_outbox_events_handled_total", map[string]string{"handler": "delivery.post", "outcome": "failure"}},
		{"courier_outbox_events_dead_lettered_total", map[string]string{"type": "delivery.post"}},
		{"courier_outbox_events_enqueued_total", map[string]string{"type": "activity.outgoing"}},
		{"courier_outbox_events_settled_total", map[string]string{"type": "inbox.received", "outcome": "dead"}},
		{"courier_outbox_ledger_claims_total", map[string]string{"handler": "inbox.import", "result": "taken_over"}},
		{"courier_inbox_requests_total", map[string]string{"result": "accepted"}},
	} {
		if v := value(fams, c.name, c.labels); v != 0 {
			t.Errorf("%s%v = %v on a fresh instance, want a series at 0", c.name, c.labels, v)
		}
	}
}

// runApp starts courier serve in this process on a fresh SQLite file, both
// listeners on free loopback ports, with mutate applied to its settings,
// and stops it when the test ends (a Run error fails the test).
func runApp(t *testing.T, mutate func(*Config)) *app {
	t.Helper()
	cfg := defaultConfig()
	cfg.DB = storetest.Location(t)
	cfg.Synchronous = "NORMAL"
	cfg.Listen = "127.0.0.1:0"
	cfg.OpsListen = "127.0.0.1:0"
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newApp(ctx, cfg, slog.New(slog.DiscardHandler), true)
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
	return a
}
