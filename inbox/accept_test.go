package inbox_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/store"
)

func note(id, author string, extra map[string]any) map[string]any {
	n := map[string]any{
		"id": id, "type": "Note", "attributedTo": author, "content": "<p>hello</p>",
		"to": []string{activitypub.Public}, "published": "2026-01-02T03:04:05Z",
	}
	for k, v := range extra {
		n[k] = v
	}
	return n
}

func activity(id, typ, actor string, object any) map[string]any {
	return map[string]any{"@context": activitypub.ActivityStreams, "id": id, "type": typ, "actor": actor, "object": object}
}

// TestRejections posts one request per rejection path and checks its
// status, its JSON error body, its metrics result, and that nothing was
// recorded.
func TestRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	b.remote.add("carol", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	dave := b.localActor(t, "dave", false)
	bob := b.remote.actor("bob")
	if _, err := b.st.Block(b.ctx, dave, bob); err != nil {
		t.Fatal(err)
	}
	create := func() []byte {
		id := b.id("create")
		return mustJSON(t, activity(id, "Create", bob, note(id+"/note", bob, nil)))
	}
	asBob := b.as(t, "bob")

	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		status int
		result string
	}{
		{"no signature", func() *http.Request {
			return b.request(t, "/inbox", create(), signer{})
		}, 401, "no_signature"},
		{"RFC 9421 signature without content-digest", func() *http.Request {
			r := b.request(t, "/inbox", create(), signer{})
			r.Header.Set("Signature-Input", `sig1=("@method" "@target-uri");keyid="`+b.remote.keyID("bob")+`"`)
			r.Header.Set("Signature", "sig1=:AAAA:")
			return r
		}, 401, "unsigned_header"},
		{"RFC 9421 signature with an unsupported component", func() *http.Request {
			body := create()
			r := b.request(t, "/inbox", body, signer{})
			r.Header.Set("Signature-Input", `sig1=("@method" "@target-uri" "content-digest";bs);created=`+
				strconv.FormatInt(time.Now().Unix(), 10)+`;keyid="`+b.remote.keyID("bob")+`"`)
			r.Header.Set("Signature", "sig1=:AAAA:")
			r.Header.Set("Content-Digest", activitypub.ContentDigest(body))
			return r
		}, 401, "rfc9421_signature"},
		{"malformed signature header", func() *http.Request {
			r := b.request(t, "/inbox", create(), signer{})
			r.Header.Set("Signature", `keyId="x",headers="date`)
			return r
		}, 401, "malformed_signature"},
		{"unknown key", func() *http.Request {
			return b.request(t, "/inbox", create(), signer{keyID: b.remote.keyID("nobody"), key: key(t, keyRemote)})
		}, 401, "unknown_key"},
		{"bad signature", func() *http.Request {
			return b.request(t, "/inbox", create(), signer{keyID: b.remote.keyID("bob"), key: key(t, keyStranger)})
		}, 401, "bad_signature"},
		{"digest mismatch", func() *http.Request {
			r := b.request(t, "/inbox", create(), asBob)
			other := create()
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(other)), int64(len(other))
			return r
		}, 401, "digest_mismatch"},
		{"stale date", func() *http.Request {
			s := asBob
			s.at = time.Now().Add(-2 * time.Hour)
			return b.request(t, "/inbox", create(), s)
		}, 401, "date_out_of_window"},
		{"future date", func() *http.Request {
			s := asBob
			s.at = time.Now().Add(2 * time.Hour)
			return b.request(t, "/inbox", create(), s)
		}, 401, "date_out_of_window"},
		{"digest not signed", func() *http.Request {
			r := b.request(t, "/inbox", create(), asBob)
			r.Header.Set("Signature", strings.Replace(r.Header.Get("Signature"), " digest", "", 1))
			return r
		}, 401, "unsigned_header"},
		{"actor not key owner", func() *http.Request {
			id := b.id("create")
			carol := b.remote.actor("carol")
			return b.request(t, "/inbox", mustJSON(t, activity(id, "Create", carol, note(id+"/n", carol, nil))), asBob)
		}, 401, "actor_not_key_owner"},
		{"object on another host", func() *http.Request {
			id := b.id("create")
			return b.request(t, "/inbox", mustJSON(t, activity(id, "Create", bob, note("https://victim.example/notes/1", bob, nil))), asBob)
		}, 403, "origin_mismatch"},
		{"object attributed to another actor", func() *http.Request {
			id := b.id("create")
			return b.request(t, "/inbox", mustJSON(t, activity(id, "Create", bob, note(id+"/n", b.remote.actor("carol"), nil))), asBob)
		}, 403, "origin_mismatch"},
		{"update of another actor", func() *http.Request {
			id := b.id("update")
			return b.request(t, "/inbox", mustJSON(t, activity(id, "Update", bob, map[string]any{
				"id": b.remote.actor("carol"), "type": "Person", "inbox": b.remote.actor("carol") + "/inbox"})), asBob)
		}, 403, "origin_mismatch"},
		{"delete of another host's object", func() *http.Request {
			return b.request(t, "/inbox", mustJSON(t, activity(b.id("delete"), "Delete", bob, "https://victim.example/notes/1")), asBob)
		}, 403, "origin_mismatch"},
		{"activity id on another host", func() *http.Request {
			return b.request(t, "/inbox", mustJSON(t, activity("https://victim.example/activities/1", "Like", bob, alice.URI)), asBob)
		}, 403, "origin_mismatch"},
		{"undo of another actor's activity", func() *http.Request {
			inner := activity(b.id("follow"), "Follow", b.remote.actor("carol"), alice.URI)
			return b.request(t, "/inbox", mustJSON(t, activity(b.id("undo"), "Undo", bob, inner)), asBob)
		}, 403, "origin_mismatch"},
		{"blocked actor at its blocker's inbox", func() *http.Request {
			return b.request(t, "/users/dave/inbox", create(), asBob)
		}, 403, "actor_blocked"},
		{"blocked actor following its blocker", func() *http.Request {
			return b.request(t, "/inbox", mustJSON(t, activity(b.id("follow"), "Follow", bob, dave.URI)), asBob)
		}, 403, "actor_blocked"},
		{"oversized body", func() *http.Request {
			id := b.id("create")
			big := note(id+"/n", bob, map[string]any{"content": strings.Repeat("x", inbox.DefaultMaxBody)})
			return b.request(t, "/inbox", mustJSON(t, activity(id, "Create", bob, big)), asBob)
		}, 413, "body_too_large"},
		{"oversized chunked body", func() *http.Request {
			id := b.id("create")
			big := mustJSON(t, activity(id, "Create", bob, note(id+"/n", bob, map[string]any{"content": strings.Repeat("x", inbox.DefaultMaxBody)})))
			r := b.request(t, "/inbox", big, asBob)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(big)), -1 // no Content-Length: the read limit catches it
			return r
		}, 413, "body_too_large"},
		{"bad content type", func() *http.Request {
			r := b.request(t, "/inbox", create(), asBob)
			r.Header.Set("Content-Type", "application/json")
			return r
		}, 415, "bad_content_type"},
		{"ld+json without the ActivityStreams profile", func() *http.Request {
			r := b.request(t, "/inbox", create(), asBob)
			r.Header.Set("Content-Type", "application/ld+json")
			return r
		}, 415, "bad_content_type"},
		{"malformed JSON", func() *http.Request {
			return b.request(t, "/inbox", []byte(`{"id": "x", "type": "Create",`), asBob)
		}, 400, "malformed_json"},
		{"JSON that is no object", func() *http.Request {
			return b.request(t, "/inbox", []byte(`["Create"]`), asBob)
		}, 400, "malformed_json"},
		{"missing actor", func() *http.Request {
			return b.request(t, "/inbox", []byte(`{"id": "`+b.id("x")+`", "type": "Create"}`), asBob)
		}, 400, "missing_field"},
		{"actor that is no URL", func() *http.Request {
			return b.request(t, "/inbox", mustJSON(t, activity(b.id("x"), "Like", "bob", alice.URI)), asBob)
		}, 400, "bad_url"},
		{"activity of a local actor", func() *http.Request {
			id := b.base + "/activities/forged"
			return b.request(t, "/inbox", mustJSON(t, activity(id, "Like", alice.URI, alice.URI)),
				signer{keyID: alice.URI + "#main-key", key: key(t, keyStranger)})
		}, 403, "origin_mismatch"},
		{"unknown personal inbox", func() *http.Request {
			return b.request(t, "/users/nobody/inbox", create(), asBob)
		}, 404, "unknown_inbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.result(t, tc.result)
			status, body := do(t, tc.req())
			if status != tc.status {
				t.Fatalf("status %d, want %d (%s)", status, tc.status, body)
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
				t.Fatalf("body %q is not a JSON error: %v", body, err)
			}
			if got := b.result(t, tc.result); got != before+1 {
				t.Fatalf("courier_inbox_requests_total{result=%q} = %d, want %d", tc.result, got, before+1)
			}
		})
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities`); n != 0 {
		t.Fatalf("%d rejected activities were recorded", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, inbox.EventReceived); n != 0 {
		t.Fatalf("%d events were enqueued for rejected activities", n)
	}
	if got := b.result(t, metrics.InboxAccepted); got != 0 {
		t.Fatalf("%d requests counted accepted", got)
	}
	if n := b.remote.badGets.Load(); n != 0 {
		t.Fatalf("%d key fetches were not signed by courier", n)
	}
	if seen := b.health.seen(); len(seen) != 0 {
		t.Fatalf("rejected requests reported signs of life: %v", seen)
	}
	// The same Create, signed correctly, is accepted: the failures above
	// came from what each case broke.
	if status, body := do(t, b.request(t, "/inbox", create(), asBob)); status != http.StatusAccepted {
		t.Fatalf("a valid request: %d %s", status, body)
	}
}

// TestDomainBlock refuses a blocked domain before any key is fetched.
func TestDomainBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	bob := b.remote.actor("bob")
	like := func() map[string]any { return activity(b.id("like"), "Like", bob, b.base+"/objects/x") }
	b.mustPost(t, b.as(t, "bob"), like())
	if err := b.st.AddDomainBlock(b.ctx, "127.0.0.1", "test"); err != nil {
		t.Fatal(err)
	}
	fetches := b.remote.fetchCount("bob")
	status, body := do(t, b.request(t, "/inbox", mustJSON(t, like()), b.as(t, "bob")))
	if status != http.StatusForbidden || !strings.Contains(body, "domain blocked") {
		t.Fatalf("blocked domain: %d %s", status, body)
	}
	if b.result(t, "domain_blocked") != 1 {
		t.Fatal("domain_blocked not counted")
	}
	if b.remote.fetchCount("bob") != fetches {
		t.Fatal("a key was fetched from a blocked domain")
	}
}

// TestDomainBlockChanges checks that the inbox follows domain blocks made
// and lifted while it remembers its decisions: at once when the change is
// made through its store, within the cache's TTL when another process
// makes it. Requests dated two hours back pass the domain check and are
// then refused 401 without writing anything, so they show which decision
// the inbox holds without changing it.
func TestDomainBlockChanges(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	b := setup(t, options{domainTTL: time.Minute, now: clock.now, noWorker: true})
	b.remote.add("bob", key(t, keyRemote))
	bob := b.remote.actor("bob")
	post := func(at time.Time) int {
		s := b.as(t, "bob")
		s.at = at
		return b.post(t, s, activity(b.id("like"), "Like", bob, b.base+"/objects/x"))
	}
	stale := time.Now().Add(-2 * time.Hour)
	steps := []struct {
		name   string
		change func()
		at     time.Time
		want   int
	}{
		{"before any block", func() {}, time.Time{}, http.StatusAccepted},
		{"blocked here", func() {
			if err := b.st.AddDomainBlock(b.ctx, "127.0.0.1", "test"); err != nil {
				t.Fatal(err)
			}
		}, time.Time{}, http.StatusForbidden},
		{"unblocked here", func() {
			if err := b.st.RemoveDomainBlock(b.ctx, "127.0.0.1"); err != nil {
				t.Fatal(err)
			}
		}, time.Time{}, http.StatusAccepted},
		{"decided again after the commit", func() {}, stale, http.StatusUnauthorized},
		{"blocked by another process, within the TTL", func() {
			other := openDB(t, b.loc, "NORMAL")
			if err := store.New(other, b.base, nil).AddDomainBlock(b.ctx, "127.0.0.1", "elsewhere"); err != nil {
				t.Fatal(err)
			}
			clock.advance(59 * time.Second)
		}, stale, http.StatusUnauthorized},
		{"blocked by another process, after the TTL", func() { clock.advance(time.Second) }, stale, http.StatusForbidden},
	}
	for _, s := range steps {
		s.change()
		if got := post(s.at); got != s.want {
			t.Fatalf("%s: status %d, want %d", s.name, got, s.want)
		}
	}
}

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestSignOfLife reports each verified sender's host, at most once per
// interval.
func TestSignOfLife(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	bob := b.remote.actor("bob")
	for range 3 {
		b.mustPost(t, b.as(t, "bob"), activity(b.id("like"), "Like", bob, b.base+"/objects/x"))
	}
	want := strings.TrimPrefix(b.remote.srv.URL, "http://")
	if seen := b.health.seen(); len(seen) != 1 || seen[0] != want {
		t.Fatalf("signs of life %v, want one for %s", seen, want)
	}
}

// TestSignatureAlgorithms: the algorithm comes from the key, never from the
// header: hs2019 and rsa-sha256 verify with an RSA key, and a header naming
// an HMAC algorithm changes nothing (a public key is never used as an HMAC
// secret).
func TestSignatureAlgorithms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	bob := b.remote.actor("bob")
	for _, alg := range []string{"rsa-sha256", "hs2019", "hmac-sha256", ""} {
		r := b.request(t, "/inbox", mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/x")), b.as(t, "bob"))
		sig := r.Header.Get("Signature")
		if !strings.Contains(sig, `algorithm="rsa-sha256"`) {
			t.Fatalf("signer wrote %s", sig)
		}
		if alg == "" {
			sig = strings.Replace(sig, `algorithm="rsa-sha256",`, "", 1)
		} else {
			sig = strings.Replace(sig, `algorithm="rsa-sha256"`, `algorithm="`+alg+`"`, 1)
		}
		r.Header.Set("Signature", sig)
		if status, body := do(t, r); status != http.StatusAccepted {
			t.Fatalf("algorithm %q: %d %s", alg, status, body)
		}
	}
	// An HMAC "signature" made with the public key as the secret fails.
	r := b.request(t, "/inbox", mustJSON(t, activity(b.id("like"), "Like", bob, b.base+"/objects/x")), b.as(t, "bob"))
	pem, err := activitypub.EncodePublicKeyPEM(&key(t, keyRemote).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, []byte(pem))
	mac.Write([]byte("forged"))
	forged := regexp.MustCompile(`signature="[^"]*"`).ReplaceAllString(r.Header.Get("Signature"),
		`signature="`+base64.StdEncoding.EncodeToString(mac.Sum(nil))+`"`)
	r.Header.Set("Signature", strings.Replace(forged, `algorithm="rsa-sha256"`, `algorithm="hmac-sha256"`, 1))
	if status, _ := do(t, r); status != http.StatusUnauthorized {
		t.Fatalf("HMAC forgery: %d", status)
	}
}
