package inbox_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// FuzzInbox runs the whole acceptance path on arbitrary bodies and header
// values: the handler must never panic nor answer 5xx, every refusal must
// carry a JSON error, and nothing may be accepted without a signature that
// verifies. Seeds: testdata/fuzz/FuzzInbox and a correctly signed request
// made at start-up.
func FuzzInbox(f *testing.F) {
	b := setup(f, options{noWorker: true, loopbackOnly: true})
	b.remote.add("bob", key(f, keyRemote))
	bob := b.remote.actor("bob")
	alice := b.localActor(f, "alice", false)
	body := mustJSON(f, activity(b.remote.url("/activities/1"), "Follow", bob, alice.URI))
	signed := b.request(f, "/inbox", body, b.as(f, "bob"))
	f.Add(body, "/inbox", activitypub.ContentType, signed.Header.Get("Signature"), signed.Header.Get("Date"),
		signed.Header.Get("Digest"))
	f.Add(body, "/users/alice/inbox", activitypub.LDContentType, signed.Header.Get("Signature"), signed.Header.Get("Date"),
		signed.Header.Get("Digest"))
	handler := b.srv.Config.Handler
	bobKey := &key(f, keyRemote).PublicKey
	verifies := func(r *http.Request, body []byte) bool {
		return activitypub.Verify(r, body, bobKey, activitypub.VerifyOptions{}) == nil
	}

	f.Fuzz(func(t *testing.T, body []byte, path, contentType, signature, date, digest string) {
		if path != "/inbox" {
			path = "/users/alice/inbox"
		}
		r := httptest.NewRequest(http.MethodPost, b.base+path, bytes.NewReader(body))
		r.Host = signed.Host
		for k, v := range map[string]string{"Content-Type": contentType, "Signature": signature, "Date": date, "Digest": digest} {
			if v != "" {
				r.Header[k] = []string{v}
			}
		}
		check := r.Clone(r.Context())
		w := httptest.NewRecorder()
		start := time.Now()
		handler.ServeHTTP(w, r)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("took %s", took)
		}
		switch status := w.Code; {
		case status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != "" &&
			strings.Contains(w.Body.String(), "retry later"):
			// Deferred: the key could not be fetched now (a temporary
			// condition), never a verdict.
		case status >= 500:
			t.Fatalf("status %d: %s", status, w.Body)
		case status == http.StatusAccepted:
			if !verifies(check, body) {
				// Only a Delete of a gone actor may be answered 202 unverified,
				// and bob is not gone.
				t.Fatalf("202 for a request whose signature does not verify")
			}
		default:
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("status %d without a JSON error: %q", status, w.Body)
			}
		}
	})
}
