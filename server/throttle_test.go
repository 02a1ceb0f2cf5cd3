package server

import (
	"net/http"
	"testing"

	"github.com/courier-ap/courier/limit"
)

// TestFailedBearerTokensThrottled: wrong outbox tokens from one address
// are answered 401 up to limit.DefaultFailureBurst, then 429 with
// Retry-After, the right token included (it is not compared), on writes
// and on the owner's reads alike; nothing is written meanwhile.
func TestFailedBearerTokensThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	note := map[string]any{"type": "Note", "content": "hi", "to": []string{"https://www.w3.org/ns/activitystreams#Public"}}
	for i := range limit.DefaultFailureBurst {
		r := b.post(t, "alice", "guess-"+string(rune('a'+i)), note)
		wantStatus(t, r, http.StatusUnauthorized)
	}
	r := b.post(t, "alice", b.token, note)
	wantStatus(t, r, http.StatusTooManyRequests)
	if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("429 without a Retry-After: %q", ra)
	}
	wantStatus(t, b.get(t, "/users/alice/outbox", "Authorization", "Bearer "+b.token), http.StatusTooManyRequests)
	if n := b.count(t, "SELECT COUNT(*) FROM objects"); n != 0 {
		t.Fatalf("%d objects written while throttled", n)
	}
	// Without a token the public view is served: no credential, no attempt.
	wantStatus(t, b.get(t, "/users/alice/outbox"), http.StatusOK)
}

// With authorized fetch, a bearer token on an actor's document is checked
// by the same throttle: wrong tokens are 401 up to the burst, then 429 with
// Retry-After, the right one included.
func TestAuthorizedFetchBearerThrottled(t *testing.T) {
	t.Parallel()
	b := setupSigned(t, true)
	for i := range limit.DefaultFailureBurst {
		r := b.do(t, http.MethodGet, "/users/alice", nil, "Accept", apJSON, "Authorization", "Bearer guess-"+string(rune('a'+i)))
		wantStatus(t, r, http.StatusUnauthorized)
	}
	for _, path := range []string{"/users/alice", "/users/alice/outbox"} {
		r := b.do(t, http.MethodGet, path, nil, "Accept", apJSON, "Authorization", "Bearer "+b.token)
		wantStatus(t, r, http.StatusTooManyRequests)
		if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Fatalf("%s: 429 without a Retry-After: %q", path, ra)
		}
	}
}

// TestOtherActorsTokenForbidden: another local actor's valid token on an
// outbox is 403, on writes and on the owner's reads, and is no failed
// attempt: an application serving many actors from one address is never
// throttled for it, and the right token still works after many.
func TestOtherActorsTokenForbidden(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, bobTok := b.actor(t, "bob")
	note := map[string]any{"type": "Note", "content": "hi", "to": []string{"https://www.w3.org/ns/activitystreams#Public"}}
	for range 2 * limit.DefaultFailureBurst {
		wantErrorBody(t, b.post(t, "alice", bobTok, note), http.StatusForbidden, "bob")
	}
	wantStatus(t, b.get(t, "/users/alice/outbox", "Authorization", "Bearer "+bobTok), http.StatusForbidden)
	wantStatus(t, b.post(t, "alice", b.token, note), http.StatusCreated)
	wantStatus(t, b.post(t, "bob", bobTok, note), http.StatusCreated)
	if n := b.count(t, "SELECT COUNT(*) FROM objects"); n != 2 {
		t.Fatalf("%d objects written, want 2", n)
	}
}
