package inbox_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// TestRFC9421Accepted: an activity signed with RFC 9421 (what Fedify 2 and
// Mastodon 4.7 send first) is verified by the inbox with the same key
// resolution and owner check as draft-cavage, answered 202 and stored
// once; one that cannot be verified gets 401, never 202.
func TestRFC9421Accepted(t *testing.T) {
	t.Parallel()
	learnt := &schemeLog{}
	b := setup(t, options{schemes: learnt})
	b.remote.add("bob", key(t, keyRemote))
	b.remote.add("eve", key(t, keyStranger))
	bob := b.remote.actor("bob")
	signed := func(t *testing.T, body []byte, keyID string, who string, at time.Time) *http.Request {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.base+"/inbox", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", activitypub.ContentType)
		k := key(t, keyRemote)
		if who == "eve" {
			k = key(t, keyStranger)
		}
		if err := activitypub.SignMessage(req, body, keyID, k, at); err != nil {
			t.Fatal(err)
		}
		return req
	}

	like := mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/x"))
	if status, body := do(t, signed(t, like, b.remote.keyID("bob"), "bob", time.Now())); status != http.StatusAccepted {
		t.Fatalf("RFC 9421 Like: %d %s", status, body)
	}
	if n := b.result(t, "accepted"); n != 1 {
		t.Fatalf("accepted %d, want 1", n)
	}
	if got := learnt.all(); len(got) != 1 || got[0] != strings.TrimPrefix(b.remote.srv.URL, "http://")+" rsa-v1_5-sha256" {
		t.Fatalf("hosts learnt to sign RFC 9421: %v", got)
	}
	// A draft-cavage request teaches nothing.
	if status, body := do(t, b.request(t, "/inbox", mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/c")), b.as(t, "bob"))); status != http.StatusAccepted {
		t.Fatalf("draft-cavage Like: %d %s", status, body)
	}
	if got := learnt.all(); len(got) != 1 {
		t.Fatalf("hosts learnt after a draft-cavage request: %v", got)
	}
	// The same activity again is a duplicate, still 202.
	if status, body := do(t, signed(t, like, b.remote.keyID("bob"), "bob", time.Now())); status != http.StatusAccepted {
		t.Fatalf("RFC 9421 Like again: %d %s", status, body)
	}

	for _, tc := range []struct {
		name   string
		req    func(t *testing.T) *http.Request
		result string
	}{
		{"signed by another key than the keyid's", func(t *testing.T) *http.Request {
			return signed(t, mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/y")), b.remote.keyID("bob"), "eve", time.Now())
		}, "bad_signature"},
		{"key owned by another actor", func(t *testing.T) *http.Request {
			return signed(t, mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/y")), b.remote.keyID("eve"), "eve", time.Now())
		}, "actor_not_key_owner"},
		{"created two hours ago", func(t *testing.T) *http.Request {
			return signed(t, mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/y")), b.remote.keyID("bob"), "bob", time.Now().Add(-2*time.Hour))
		}, "date_out_of_window"},
		{"body changed after signing", func(t *testing.T) *http.Request {
			body := mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/y"))
			r := signed(t, body, b.remote.keyID("bob"), "bob", time.Now())
			changed := bytes.Replace(body, []byte("/objects/y"), []byte("/objects/z"), 1)
			r.Body, r.ContentLength = nopCloser{bytes.NewReader(changed)}, int64(len(changed))
			return r
		}, "digest_mismatch"},
		{"signed for another inbox", func(t *testing.T) *http.Request {
			r := signed(t, mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/y")), b.remote.keyID("bob"), "bob", time.Now())
			// The same inbox with a query: @target-uri differs.
			r.URL.RawQuery = "moved=1"
			return r
		}, "bad_signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.result(t, tc.result)
			if status, body := do(t, tc.req(t)); status != http.StatusUnauthorized {
				t.Fatalf("%d %s, want 401", status, body)
			}
			if got := b.result(t, tc.result); got != before+1 {
				t.Fatalf("result %s counted %d, want %d", tc.result, got, before+1)
			}
			if got := learnt.all(); len(got) != 2 {
				t.Fatalf("a refused request taught %v", got)
			}
		})
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// schemeLog records what the inbox reports to inbox.Schemes.
type schemeLog struct {
	mu  sync.Mutex
	got []string
}

func (l *schemeLog) AcceptsRFC9421(_ context.Context, host, alg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, host+" "+alg)
}

func (l *schemeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// TestRFC9421Ed25519FromPeer: a peer whose actor publishes an Ed25519 key
// as a FEP-521a Multikey in assertionMethod signs with RFC 9421 ed25519;
// the inbox resolves the key by its id, checks its controller is the
// actor, verifies, answers 202 and reports the host as taking Ed25519. The
// same key id signed by another Ed25519 key is 401.
func TestRFC9421Ed25519FromPeer(t *testing.T) {
	t.Parallel()
	learnt := &schemeLog{}
	b := setup(t, options{schemes: learnt})
	b.remote.add("carol", key(t, keyRemote))
	_, ed, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	b.remote.mu.Lock()
	b.remote.actors["/users/carol"].ed = ed
	b.remote.mu.Unlock()
	carol := b.remote.actor("carol")
	post := func(k ed25519.PrivateKey) (int, string) {
		body := mustJSON(t, activity(b.id("like"), "Like", carol, b.base+"/objects/x"))
		req, err := http.NewRequest(http.MethodPost, b.base+"/inbox", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", activitypub.ContentType)
		if err := activitypub.SignMessage(req, body, carol+"#ed25519-key", k, time.Now()); err != nil {
			t.Fatal(err)
		}
		return do(t, req)
	}
	if status, body := post(ed); status != http.StatusAccepted {
		t.Fatalf("Ed25519 RFC 9421 Like: %d %s", status, body)
	}
	if got := learnt.all(); len(got) != 1 || got[0] != strings.TrimPrefix(b.remote.srv.URL, "http://")+" ed25519" {
		t.Fatalf("hosts learnt: %v", got)
	}
	_, other, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, body := post(other); status != http.StatusUnauthorized || !strings.Contains(body, "bad signature") {
		t.Fatalf("another Ed25519 key: %d %s", status, body)
	}
}
