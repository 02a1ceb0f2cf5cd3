package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/outbox"
)

// burstHost is one remote server whose actors all follow courier's actors
// at once: it serves their actor documents (every GET held until release
// is closed, so that the first fetches are in flight while the rest of the
// burst arrives, whatever the machine's speed) and takes the Accepts
// courier delivers to their inboxes.
type burstHost struct {
	srv     *httptest.Server
	pem     string
	release chan struct{}
	once    sync.Once

	mu      sync.Mutex
	accepts map[string]string // Accept id -> the Follow it accepts
	fetches int
}

func newBurstHost(t *testing.T) *burstHost {
	t.Helper()
	pem, err := activitypub.EncodePublicKeyPEM(&key(t, keyRemote).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	h := &burstHost{pem: pem, release: make(chan struct{}), accepts: map[string]string{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.open)
	return h
}

// open lets the held fetches through.
func (h *burstHost) open() { h.once.Do(func() { close(h.release) }) }

func (h *burstHost) actor(i int) string { return fmt.Sprintf("%s/users/f%d", h.srv.URL, i) }

func (h *burstHost) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var a struct {
			ID     string          `json:"id"`
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &a); err != nil || a.Type != "Accept" {
			http.Error(w, "not an Accept", http.StatusBadRequest)
			return
		}
		var follow struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(a.Object, &follow); err != nil {
			_ = json.Unmarshal(a.Object, &follow.ID)
		}
		h.mu.Lock()
		h.accepts[a.ID] = follow.ID
		h.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		return
	}
	<-h.release
	h.mu.Lock()
	h.fetches++
	h.mu.Unlock()
	id := h.srv.URL + r.URL.Path
	w.Header().Set("Content-Type", activitypub.ContentType)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"@context":          []string{activitypub.ActivityStreams, activitypub.SecurityContext},
		"id":                id,
		"type":              "Person",
		"preferredUsername": path.Base(r.URL.Path),
		"inbox":             id + "/inbox",
		"endpoints":         map[string]string{"sharedInbox": h.srv.URL + "/inbox"},
		"publicKey":         map[string]string{"id": id + "#main-key", "owner": id, "publicKeyPem": h.pem},
	})
}

// sendLikeMastodon posts body to url signed by keyID, retrying a 5xx or a
// 429 after its Retry-After (1 s when absent) as Mastodon's delivery does,
// up to attempts times; a 4xx other than 429 is final. It returns the
// statuses of every attempt, each also given to answered as it comes.
func sendLikeMastodon(ctx context.Context, url string, body []byte, keyID string, attempts int, t *testing.T, answered func(int)) []int {
	var statuses []int
	for range attempts {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
		if err != nil {
			t.Error(err)
			return statuses
		}
		req.Header.Set("Content-Type", activitypub.ContentType)
		if err := activitypub.SignRequest(req, body, keyID, key(t, keyRemote), time.Now()); err != nil {
			t.Error(err)
			return statuses
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("POST: %v", err)
			return statuses
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		answered(resp.StatusCode)
		switch {
		case resp.StatusCode < 300:
			return statuses
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			wait := time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = time.Duration(min(s, 30)) * time.Second
			}
			select {
			case <-ctx.Done():
				return statuses
			case <-time.After(wait):
			}
		default:
			return statuses // a 4xx is final for Mastodon and GoToSocial
		}
	}
	return statuses
}

// TestFollowBurstOfOneHost is ten people of one instance following
// courier's actors at once, the ordinary effect of a boost: 200 Follows
// from 20 actors of one host, 64 in flight, through the production fetch
// gate, sent by a sender that retries 5xx as Mastodon does. Courier's own
// busyness (the gate refusing a ninth fetch from the host while eight are in
// flight) must defer requests (503, Retry-After), never refuse them: 200
// followers, 200 Accepts delivered, no 401.
func TestFollowBurstOfOneHost(t *testing.T) {
	const actors, locals, inFlight = 20, 10, 64
	b := setup(t, options{gate: true, noWorker: true})
	host := newBurstHost(t)

	svc, err := delivery.New(delivery.Config{DB: b.db, Store: b.st, Resolver: b.resolver, BaseURL: b.base, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry()
	b.importer.Register(reg)
	svc.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: b.db.Write, Read: b.db.Read, Registry: reg, Concurrency: 8, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.db.OnWrite(w.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	runs.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	runs.Go(func() {
		if err := svc.Run(ctx); err != nil {
			t.Errorf("delivery: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); runs.Wait() })

	var targets []string
	for j := range locals {
		targets = append(targets, b.localActor(t, fmt.Sprintf("local%d", j), false).URI)
	}
	type job struct{ follower, target int }
	jobs := make(chan job, actors*locals)
	for k := range actors * locals { // every actor of the host within the first 64
		jobs <- job{follower: k % actors, target: k / actors}
	}
	close(jobs)

	var (
		mu       sync.Mutex
		statuses = map[int]int{} // status -> how many answers
		failed   []string
		deferred atomic.Int64
	)
	sendCtx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	var senders sync.WaitGroup
	for range inFlight {
		senders.Go(func() {
			for j := range jobs {
				actor := host.actor(j.follower)
				follow := activity(fmt.Sprintf("%s/follows/%d", actor, j.target), "Follow", actor, targets[j.target])
				got := sendLikeMastodon(sendCtx, b.base+"/inbox", mustJSON(t, follow), actor+"#main-key", 8, t,
					func(s int) {
						if s != http.StatusAccepted {
							host.open() // the burst has met courier's limit: let the held fetches end
						}
						if s == http.StatusServiceUnavailable {
							deferred.Add(1)
						}
					})
				mu.Lock()
				for _, s := range got {
					statuses[s]++
				}
				if len(got) == 0 || got[len(got)-1] != http.StatusAccepted {
					failed = append(failed, fmt.Sprintf("%s -> local%d: %v", actor, j.target, got))
				}
				mu.Unlock()
			}
		})
	}
	go func() { // should nothing be refused, the burst still ends
		select {
		case <-time.After(10 * time.Second):
			host.open()
		case <-sendCtx.Done():
		}
	}()
	began := time.Now()
	senders.Wait()
	t.Logf("answers by status: %v; %d fetches from the host; sent in %s", statuses, host.fetchCount(), time.Since(began))
	if statuses[http.StatusUnauthorized] > 0 || len(failed) > 0 {
		t.Fatalf("%d of %d Follows not accepted (answers by status %v), e.g. %v",
			len(failed), actors*locals, statuses, failed[:min(len(failed), 3)])
	}
	if deferred.Load() == 0 {
		t.Errorf("no request was deferred: the burst did not meet the fetch gate")
	}
	if got := deferredCount(t, b, metrics.InboxDeferredKeyHostBusy); got != int(deferred.Load()) {
		t.Errorf("courier_inbox_deferred_total{reason=key_host_busy} = %d, want %d", got, deferred.Load())
	}
	for _, hb := range b.handler.HostBudgets() {
		if hb.Host == strings.TrimPrefix(host.srv.URL, "http://") && hb.Deferred != deferred.Load() {
			t.Errorf("admin inbound: %s deferred %d, want %d", hb.Host, hb.Deferred, deferred.Load())
		}
	}

	deadline := time.Now().Add(2 * time.Minute)
	for {
		host.mu.Lock()
		n := len(host.accepts)
		host.mu.Unlock()
		if n == actors*locals {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Accepts delivered, want %d", n, actors*locals)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("Accepts delivered %s after the burst began", time.Since(began))
	if n := b.count(t, `SELECT COUNT(*) FROM followers WHERE state = 'accepted'`); n != actors*locals {
		t.Fatalf("%d accepted followers, want %d", n, actors*locals)
	}
	follows := map[string]bool{}
	host.mu.Lock()
	for _, f := range host.accepts {
		follows[f] = true
	}
	host.mu.Unlock()
	if len(follows) != actors*locals {
		t.Fatalf("the Accepts accept %d distinct Follows, want %d", len(follows), actors*locals)
	}
}

func (h *burstHost) fetchCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fetches
}

// deferredCount returns courier_inbox_deferred_total{reason}.
func deferredCount(t *testing.T, b *testBundle, reason string) int {
	t.Helper()
	mfs, err := b.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "courier_inbox_deferred_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// TestKeyFetchFailuresDefer: a key whose fetch fails for a temporary
// reason (a 5xx, 429, a connection dropped before the answer) defers the
// request, 503 with Retry-After; what the remote answers for good (404, a
// document without the key) stays 401.
func TestKeyFetchFailuresDefer(t *testing.T) {
	b := setup(t)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch path.Base(r.URL.Path) {
		case "e500":
			http.Error(w, "oops", http.StatusInternalServerError)
		case "e503":
			w.Header().Set("Retry-After", "120")
			http.Error(w, "later", http.StatusServiceUnavailable)
		case "e429":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "drop":
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		case "nokey":
			id := "http://" + r.Host + r.URL.Path
			w.Header().Set("Content-Type", activitypub.ContentType)
			_ = json.NewEncoder(w).Encode(map[string]any{"@context": activitypub.ActivityStreams, "id": id,
				"type": "Person", "inbox": id + "/inbox"})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(flaky.Close)
	local := b.localActor(t, "ana", false)
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
	}{
		{"e500", http.StatusServiceUnavailable, "30"},
		{"e503", http.StatusServiceUnavailable, "120"},
		{"e429", http.StatusServiceUnavailable, "30"},
		{"drop", http.StatusServiceUnavailable, "30"},
		{"missing", http.StatusUnauthorized, ""},
		{"nokey", http.StatusUnauthorized, ""},
	} {
		actor := flaky.URL + "/users/" + c.name
		s := signer{keyID: actor + "#main-key", key: key(t, keyRemote)}
		req := b.request(t, "/inbox", mustJSON(t, activity(actor+"/follows/1", "Follow", actor, local.URI)), s)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Retry-After") != c.retryAfter ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("key host answering %s: %d Retry-After %q %s, want %d Retry-After %q", c.name, resp.StatusCode,
				resp.Header.Get("Retry-After"), body, c.status, c.retryAfter)
		}
	}
	if got := deferredCount(t, b, metrics.InboxDeferredKeyHostUnavailable); got != 4 {
		t.Errorf("courier_inbox_deferred_total{reason=key_host_unavailable} = %d, want 4", got)
	}
}
