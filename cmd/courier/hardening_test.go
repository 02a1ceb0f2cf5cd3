package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/sqldb/storetest"
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
	cfg := defaultConfig()
	addr := holdAddr(t, &cfg)
	cfg.DB = storetest.Location(t)
	cfg.Synchronous = "NORMAL"
	cfg.Listen = addr
	cfg.OpsListen = "127.0.0.1:0"
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
	const tok = "8b3e5f0a9c1d47e2b6a05f39c8d1e74a"
	for _, allow := range []bool{true, false} {
		a, logs := startApp(t, func(c *Config) { c.AllowPrivateAddresses = allow; c.AdminToken = tok })

		warned := strings.Contains(logs.String(), "level=WARN msg=\"COURIER_ALLOW_PRIVATE_ADDRESSES is on")
		if warned != allow {
			t.Errorf("allow=%v: start warning logged=%v\n%s", allow, warned, logs.String())
		}

		ops := "http://" + a.opsListener.Addr().String()
		r, err := http.Get(ops + "/readyz")
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

		req, _ := http.NewRequest(http.MethodGet, ops+"/admin/stats", nil)
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
		code := admin.Command(context.Background(), []string{"--server", ops, "stats"}, &out, &errOut, func(k string) string { return env[k] })
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
	const tok = "8b3e5f0a9c1d47e2b6a05f39c8d1e74a"
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

	ops := "http://" + a.opsListener.Addr().String()
	req, _ := http.NewRequest(http.MethodGet, ops+"/admin/inbound", nil)
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
	if tb := view.Tombstones; tb == nil || tb.Outcome != inbox.OutcomeTombstoned || tb.Held != 0 ||
		tb.Limit != inbox.DefaultTombstoneLimit || tb.RetentionSeconds != 30*24*3600 {
		t.Fatalf("/admin/inbound tombstones %+v", tb)
	}
	var out, errOut bytes.Buffer
	env := map[string]string{"COURIER_ADMIN_TOKEN": tok}
	if code := admin.Command(context.Background(), []string{"--server", ops, "inbound"}, &out, &errOut, func(k string) string { return env[k] }); code != 0 {
		t.Fatalf("courier admin inbound: exit %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "3 requests") || !strings.Contains(out.String(), host) ||
		!strings.Contains(out.String(), `remote tombstones: 0 held`) || !strings.Contains(out.String(), `(outcome "tombstoned")`) {
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

// scriptedInbox is a remote host whose inbox answers a status the test
// sets, and which checks each POST's signature against the key it expects.
type scriptedInbox struct {
	srv    *httptest.Server
	key    *rsa.PrivateKey
	status atomic.Int32

	mu     sync.Mutex
	signer crypto.PublicKey // the key POSTs must be signed with
	posts  []string         // type of each POST, "bad-signature" when it did not verify
}

func newScriptedInbox(t *testing.T) *scriptedInbox {
	t.Helper()
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedInbox{key: key}
	s.status.Store(http.StatusServiceUnavailable)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/users/r":
			pem, _ := activitypub.EncodePublicKeyPEM(&key.PublicKey)
			doc, _ := activitypub.MarshalActorDocument(&activitypub.Actor{
				ID: s.actor(), Type: "Person", PreferredUsername: "r", Inbox: s.actor() + "/inbox",
				PublicKey: activitypub.PublicKey{ID: s.actor() + "#main-key", Owner: s.actor(), PublicKeyPem: pem},
			})
			w.Header().Set("Content-Type", activitypub.ContentType)
			w.Write(doc)
		case r.Method == http.MethodPost:
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			var act struct{ Type string }
			_ = json.Unmarshal(body, &act)
			s.mu.Lock()
			if s.signer == nil || activitypub.Verify(r, body, s.signer, activitypub.VerifyOptions{}) != nil {
				act.Type = "bad-signature"
			}
			s.posts = append(s.posts, act.Type)
			s.mu.Unlock()
			w.WriteHeader(int(s.status.Load()))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scriptedInbox) actor() string { return s.srv.URL + "/users/r" }

// verifyWith makes the inbox check every POST's signature against the
// local actor's key.
func (s *scriptedInbox) verifyWith(t *testing.T, local *store.Actor) {
	t.Helper()
	pub, err := activitypub.ParsePublicKeyPEM(local.PublicKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.signer = pub
	s.mu.Unlock()
}

// follow POSTs the remote actor's Follow (id followID) of object to inbox,
// signed with its key, and returns the answer's status.
func (s *scriptedInbox) follow(t *testing.T, inbox, followID, object string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"@context": activitypub.ActivityStreams, "id": followID,
		"type": "Follow", "actor": s.actor(), "object": object})
	req, _ := http.NewRequest(http.MethodPost, inbox, bytes.NewReader(body))
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, s.actor()+"#main-key", s.key, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (s *scriptedInbox) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

// TestDeletedActorKeyOutlivesItsDeliveries: a deleted local actor's key
// stays while a delivery of its Delete is queued (the follower's host
// answers 503), so the retried delivery is signed with it and verifies;
// once it is delivered the actor, key included, is removed. Throughout,
// its URL answers 410 with a Tombstone, and after removal its name cannot
// be taken by `courier actor create`.
func TestDeletedActorKeyOutlivesItsDeliveries(t *testing.T) {
	t.Parallel()
	remote := newScriptedInbox(t)
	a, _ := startApp(t, func(c *Config) { c.AllowPrivateAddresses = true })
	ctx := context.Background()
	alice, _, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	remote.verifyWith(t, alice)
	if st := remote.follow(t, a.cfg.BaseURL+"/inbox", remote.srv.URL+"/follows/1", alice.URI); st != http.StatusAccepted {
		t.Fatalf("Follow: %d", st)
	}
	waitFor(t, "the follower", func() bool {
		fs, err := a.store.FollowerInboxes(ctx, alice.ID)
		return err == nil && len(fs) == 1
	})

	if _, err := a.store.DeleteActor(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.ActorByName(ctx, "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted actor by name: %v, want not found", err)
	}
	wantGone(t, a, "alice")
	waitFor(t, "a refused delivery of the Delete", func() bool { return slices.Contains(remote.received(), "Delete") })
	if n, err := a.store.ReapDeletedActors(ctx, a.deliveryDone()); err != nil || n != 0 {
		t.Fatalf("reaped %d (%v) while the Delete's delivery is queued", n, err)
	}
	if _, err := a.store.ActorByURI(ctx, alice.URI); err != nil {
		t.Fatalf("the key of an actor whose Delete is queued is gone: %v", err)
	}

	remote.status.Store(http.StatusAccepted)
	waitFor(t, "the Delete delivered and the actor removed", func() bool {
		n, err := a.store.ReapDeletedActors(ctx, a.deliveryDone())
		return err == nil && n == 1
	})
	got := remote.received()
	if slices.Contains(got, "bad-signature") || !slices.Contains(got, "Delete") {
		t.Fatalf("received %v: want every POST signed with alice's key", got)
	}
	if _, err := a.store.ActorByURI(ctx, alice.URI); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after delivery the actor is still there: %v", err)
	}
	// Removed, the actor still answers 410 with its Tombstone, and its
	// name is never given to a new actor.
	wantGone(t, a, "alice")
	wantNameRefused(t, a, "alice")
	wantGone(t, a, "alice")
}
