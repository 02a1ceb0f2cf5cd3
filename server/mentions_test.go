package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// webfingerPeer is a remote server answering WebFinger for user0...userN
// (others 404), counting its lookups per name and the most it had in
// flight at once. The first lookup waits, up to a bound, for a second one
// to be in flight, so that lookups made one after another show a most of
// 1.
type webfingerPeer struct {
	srv *httptest.Server

	mu          sync.Mutex
	lookups     map[string]int
	inFlight    int
	maxInFlight int
	second      chan struct{}
	secondOnce  sync.Once
}

func newWebfingerPeer(t *testing.T) *webfingerPeer {
	p := &webfingerPeer{lookups: map[string]int{}, second: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource := r.URL.Query().Get("resource")
		user, _, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(resource, "acct:")), "@")
		p.mu.Lock()
		p.lookups[user]++
		p.inFlight++
		p.maxInFlight = max(p.maxInFlight, p.inFlight)
		if p.inFlight >= 2 {
			p.secondOnce.Do(func() { close(p.second) })
		}
		p.mu.Unlock()
		select {
		case <-p.second:
		case <-time.After(2 * time.Second): // none came: the others need not wait
			p.secondOnce.Do(func() { close(p.second) })
		case <-r.Context().Done():
		}
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
		if !strings.HasPrefix(user, "user") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", activitypub.JRDContentType)
		_ = json.NewEncoder(w).Encode(map[string]any{"subject": resource, "links": []map[string]string{
			{"rel": "self", "type": "application/activity+json", "href": p.srv.URL + "/users/" + user}}})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *webfingerPeer) counts() (map[string]int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]int, len(p.lookups))
	total := 0
	for k, v := range p.lookups {
		m[k] = v
		total += v
	}
	return m, total
}

// TestC2SMentionLookupsBounded: an object with more than MaxMentions
// distinct mentions is refused 422 naming the bound before any WebFinger
// lookup; mentions of the same names are looked up once each, side by
// side, and a later object mentioning them (or an unknown name again)
// looks nothing up: the answers are kept.
func TestC2SMentionLookupsBounded(t *testing.T) {
	t.Parallel()
	peer := newWebfingerPeer(t)
	client := activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second})
	b := setupBase(t, "", Config{Mentions: func(ctx context.Context, user, host string) (string, error) {
		return activitypub.WebFinger(ctx, client, "http", user, host)
	}})
	host := strings.TrimPrefix(peer.srv.URL, "http://")
	note := func(names ...string) map[string]any {
		tags := make([]any, 0, len(names))
		for _, n := range names {
			tags = append(tags, map[string]any{"type": "Mention", "name": "@" + n + "@" + host})
		}
		return map[string]any{"type": "Note", "content": "hi", "to": "as:Public", "tag": tags}
	}

	var many []string
	for i := range 600 {
		many = append(many, fmt.Sprintf("user%d", i))
	}
	r := b.post(t, "alice", b.token, note(many...))
	wantStatus(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.Body), fmt.Sprintf("at most %d", MaxMentions)) {
		t.Fatalf("600 mentions: %s", r.Body)
	}
	if _, n := peer.counts(); n != 0 {
		t.Fatalf("600 mentions refused after %d lookups, want none", n)
	}

	// Ten names, each mentioned five times (in varying case).
	var repeated []string
	for range 5 {
		for i := range 10 {
			n := fmt.Sprintf("user%d", i)
			if i%2 == 0 {
				n = strings.ToUpper(n[:1]) + n[1:]
			}
			repeated = append(repeated, n)
		}
	}
	r = b.post(t, "alice", b.token, note(repeated...))
	wantStatus(t, r, http.StatusCreated)
	lookups, n := peer.counts()
	if n != 10 {
		t.Fatalf("10 names mentioned 50 times: %d lookups %v, want 10", n, lookups)
	}
	if peer.maxInFlight < 2 {
		t.Fatalf("the lookups ran one after another (at most %d in flight)", peer.maxInFlight)
	}
	// Cached: the same names again, and an unknown one twice.
	wantStatus(t, b.post(t, "alice", b.token, note("user3", "user7")), http.StatusCreated)
	for range 2 {
		r := b.post(t, "alice", b.token, note("nobody"))
		wantStatus(t, r, http.StatusUnprocessableEntity)
		if !strings.Contains(string(r.Body), "no such account") {
			t.Fatalf("unknown name: %s", r.Body)
		}
	}
	if lookups, n := peer.counts(); n != 11 || lookups["nobody"] != 1 {
		t.Fatalf("after the cached lookups: %d lookups %v, want 11", n, lookups)
	}
}
