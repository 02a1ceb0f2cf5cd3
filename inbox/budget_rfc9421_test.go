package inbox_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// TestHostBudgetRFC9421: requests signed only with RFC 9421 are charged
// to their host's budget like draft-cavage ones, and share it with them:
// past 5 a minute (3 RFC 9421, 2 draft-cavage here) an RFC 9421 request
// gets 429 with Retry-After, nothing stored, until the budget refills.
func TestHostBudgetRFC9421(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	b := setup(t, options{budget: 5, now: clock.now})
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	follow := func() []byte { return mustJSON(t, activity(b.id("follow"), "Follow", bob, alice.URI)) }
	signed := func(body []byte) *http.Request {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.base+"/inbox", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", activitypub.ContentType)
		if err := activitypub.SignMessage(req, body, b.remote.keyID("bob"), key(t, keyRemote), clock.now()); err != nil {
			t.Fatal(err)
		}
		if req.Header.Get("Signature-Input") == "" || req.Header.Get("Signature") == "" {
			t.Fatalf("not an RFC 9421 request: %v", req.Header)
		}
		return req
	}

	for i := range 3 {
		if status, body := do(t, signed(follow())); status != http.StatusAccepted {
			t.Fatalf("RFC 9421 request %d within the budget: %d %s", i+1, status, body)
		}
	}
	for i := range 2 {
		if status, body := do(t, b.request(t, "/inbox", follow(), b.as(t, "bob"))); status != http.StatusAccepted {
			t.Fatalf("draft-cavage request %d within the budget: %d %s", i+1, status, body)
		}
	}
	resp, err := http.DefaultClient.Do(signed(follow()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "12" {
		t.Fatalf("RFC 9421 over the budget: %d Retry-After %q, want 429 and 12 (5 a minute)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities`); n != 5 {
		t.Fatalf("%d activities stored, want the 5 within the budget", n)
	}
	hosts := b.handler.HostBudgets()
	if len(hosts) != 1 || hosts[0].Throttled != 1 || hosts[0].Requests != 5 {
		t.Fatalf("host view %+v", hosts)
	}
	clock.advance(12 * time.Second)
	if status, body := do(t, signed(follow())); status != http.StatusAccepted {
		t.Fatalf("RFC 9421 after the refill: %d %s", status, body)
	}
}
