package main

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// remoteHost is one simulated fediverse server on its own loopback port: it
// serves one actor (document and key) and an inbox that answers with a
// scripted status and records what it received.
type remoteHost struct {
	srv    *httptest.Server
	key    *rsa.PrivateKey
	status int

	mu       sync.Mutex
	received []map[string]any
}

func newRemoteHost(t *testing.T, key *rsa.PrivateKey, status int) *remoteHost {
	t.Helper()
	h := &remoteHost{key: key, status: status}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *remoteHost) actorID() string { return h.srv.URL + "/users/r" }

func (h *remoteHost) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/users/r":
		pem, _ := activitypub.EncodePublicKeyPEM(&h.key.PublicKey)
		doc, _ := activitypub.MarshalActorDocument(&activitypub.Actor{
			ID: h.actorID(), Type: "Person", PreferredUsername: "r",
			Inbox: h.actorID() + "/inbox", SharedInbox: h.srv.URL + "/inbox",
			PublicKey: activitypub.PublicKey{ID: h.actorID() + "#main-key", Owner: h.actorID(), PublicKeyPem: pem},
		})
		w.Header().Set("Content-Type", activitypub.ContentType)
		w.Write(doc)
	case r.Method == http.MethodPost:
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var act map[string]any
		if json.Unmarshal(body, &act) == nil {
			h.mu.Lock()
			h.received = append(h.received, act)
			h.mu.Unlock()
		}
		w.WriteHeader(h.status)
	default:
		http.NotFound(w, r)
	}
}

func (h *remoteHost) got(typ string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.received {
		if a["type"] == typ {
			n++
		}
	}
	return n
}

// post sends a signed activity from the host's actor to url.
func (h *remoteHost) post(t *testing.T, url string, act map[string]any) int {
	t.Helper()
	body, err := json.Marshal(act)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, h.actorID()+"#main-key", h.key, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestScrapeAfterScriptedRun runs the real serve process (server and worker)
// through a scripted run — a local write delivered to a healthy, a failing
// and a refusing host, inbound follows with a duplicate, a dead letter — and
// checks what /metrics says about it: the values, promtool's lint, and that
// every metric the dashboard and the alert rules name is exported.
func TestScrapeAfterScriptedRun(t *testing.T) {
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	healthy := newRemoteHost(t, key, http.StatusAccepted)
	failing := newRemoteHost(t, key, http.StatusServiceUnavailable)
	refusing := newRemoteHost(t, key, http.StatusBadRequest) // a permanent answer: dead letter

	cfg := defaultConfig()
	addr := holdAddr(t, &cfg)
	cfg.DB = storetest.Location(t)
	cfg.Synchronous = "NORMAL"
	cfg.Listen = addr
	cfg.OpsListen = "127.0.0.1:0"
	cfg.BaseURL = "http://" + addr
	cfg.AllowPrivateAddresses = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := newApp(ctx, cfg, slog.New(slog.DiscardHandler), true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	alice, token, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	base := cfg.BaseURL
	follow := func(h *remoteHost, n int) map[string]any {
		return map[string]any{
			"@context": activitypub.ActivityStreams,
			"id":       fmt.Sprintf("%s/follows/%d", h.srv.URL, n),
			"type":     "Follow", "actor": h.actorID(), "object": alice.URI,
		}
	}
	for i, h := range []*remoteHost{healthy, failing, refusing} {
		if st := h.post(t, base+"/inbox", follow(h, i)); st != http.StatusAccepted {
			t.Fatalf("follow from host %d answered %d", i, st)
		}
	}
	if st := healthy.post(t, base+"/inbox", follow(healthy, 0)); st != http.StatusAccepted {
		t.Fatalf("duplicate follow answered %d", st)
	}
	waitFor(t, "three followers", func() bool {
		fs, err := a.store.FollowerInboxes(ctx, alice.ID)
		return err == nil && len(fs) == 3
	})

	// The refusing host answers 400 to both schemes of the Accept's one
	// attempt (draft-cavage, then the RFC 9421 fallback); that falling back
	// does not help it is remembered before the Create is sent.
	waitFor(t, "the refusing host remembered", func() bool {
		st, _, err := a.delivery.Schemes().Status(ctx, strings.TrimPrefix(refusing.srv.URL, "http://"))
		return err == nil && st.NoFallbackUntil != nil
	})

	note := `{"type":"Note","content":"hello","to":["https://www.w3.org/ns/activitystreams#Public"],"cc":["` + alice.URI + `/followers"]}`
	req, _ := http.NewRequest(http.MethodPost, base+"/users/alice/outbox", strings.NewReader(note))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create note answered %d", resp.StatusCode)
	}

	checks := []struct {
		name   string
		labels map[string]string
		min    float64
		max    float64
	}{
		{"courier_inbox_requests_total", map[string]string{"result": "accepted"}, 3, 3},
		{"courier_inbox_requests_total", map[string]string{"result": "duplicate"}, 1, 1},
		{"courier_delivery_attempts_total", map[string]string{"outcome": "delivered", "status_class": "2xx"}, 2, 2}, // Accept and Create to the healthy host
		{"courier_delivery_attempts_total", map[string]string{"outcome": "retry", "status_class": "5xx"}, 1, 1e9},   // the failing host, retried
		{"courier_delivery_attempts_total", map[string]string{"outcome": "permanent", "status_class": "4xx"}, 2, 2}, // Accept and Create refused
		{"courier_outbox_events_dead_lettered_total", map[string]string{"type": "delivery.post"}, 2, 2},
		{"courier_outbox_events_enqueued_total", map[string]string{"type": "activity.outgoing"}, 4, 4}, // three Accepts and one Create
		{"courier_outbox_events_enqueued_total", map[string]string{"type": "inbox.received"}, 3, 3},
		{"courier_outbox_rows", map[string]string{"status": "dead_lettered", "type": "delivery.post"}, 2, 2},
		{"courier_delivery_hosts", nil, 3, 3},
		{"courier_build_info", nil, 1, 1},
	}
	var fams map[string]*dto.MetricFamily
	var raw []byte
	failed := func() []string {
		var out []string
		for _, c := range checks {
			if v := value(fams, c.name, c.labels); v < c.min || v > c.max {
				out = append(out, fmt.Sprintf("%s%v = %v, want between %v and %v", c.name, c.labels, v, c.min, c.max))
			}
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, fams = scrape(t, "http://"+a.opsListener.Addr().String()+"/metrics")
		bad := failed()
		if len(bad) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the scripted run:\n%s", strings.Join(bad, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The refusing host got the Accept twice, the Create once: no fallback
	// (delivery/scheme.go).
	if refusing.got("Accept") != 2 {
		t.Errorf("Accepts received by the refusing host: %d, want 2", refusing.got("Accept"))
	}
	if healthy.got("Create") != 1 || refusing.got("Create") != 1 || failing.got("Create") < 1 {
		t.Errorf("Creates received: healthy %d, refusing %d, failing %d", healthy.got("Create"), refusing.got("Create"), failing.got("Create"))
	}

	// Every metric the dashboard and the alert rules query is exported
	// (the JetStream ones only by the nats bus, listed in ExternalNames).
	referenced, err := metrics.ReferencedNames()
	if err != nil {
		t.Fatal(err)
	}
	scraped, err := metrics.ScrapedNames(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if unknown := metrics.Unknown(referenced, append(scraped, metrics.ExternalNames...)); len(unknown) > 0 {
		t.Errorf("dashboard or alert rules name metrics this scrape lacks: %v", unknown)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is required in CI (Debian package prometheus)")
		}
		t.Log("promtool not installed: lint of the scrape skipped")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(raw)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func scrape(t *testing.T, url string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return raw, fams
}

// value sums the samples of name whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		ok := true
		for k, v := range want {
			ok = ok && slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v })
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// waitFor polls cond for up to two minutes: generous, since under the race
// detector on a loaded machine a step of milliseconds can take seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
