package inbox_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestWrongKeysSpendTheKeyHostsBudget: requests signed with wrong keys,
// each naming a new key id, make courier fetch the key before it can tell
// the signature is wrong. The fetches are charged to the key host's budget
// first, so once it is spent the requests get 429 without a fetch; and an
// actor fetched for a key that verified nothing is not stored.
func TestWrongKeysSpendTheKeyHostsBudget(t *testing.T) {
	const budget = 10 // fetches (and requests) a minute
	b := setup(t, options{budget: budget})
	local := b.localActor(t, "ana", false)
	statuses := map[int]int{}
	for i := range 40 {
		name := fmt.Sprintf("w%d", i)
		b.remote.add(name, key(t, keyRemote))
		s := signer{keyID: b.remote.keyID(name), key: key(t, keyStranger)} // not the key it publishes
		req := b.request(t, "/inbox", mustJSON(t, activity(b.id("follow"), "Follow", b.remote.actor(name), local.URI)), s)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
	}
	fetches := 0
	for i := range 40 {
		fetches += b.remote.fetchCount(fmt.Sprintf("w%d", i))
	}
	t.Logf("answers by status %v, %d fetches", statuses, fetches)
	if statuses[http.StatusAccepted] != 0 || statuses[http.StatusTooManyRequests] == 0 ||
		statuses[http.StatusUnauthorized]+statuses[http.StatusTooManyRequests] != 40 {
		t.Errorf("answers by status %v: want 401 until the budget is spent, then 429", statuses)
	}
	if fetches > budget+1 {
		t.Errorf("%d fetches for a budget of %d a minute", fetches, budget)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM remote_actors`); n != 0 {
		t.Errorf("%d remote actors stored, none of whose keys verified a signature", n)
	}
	var keyFetches int64
	for _, hb := range b.handler.HostBudgets() {
		keyFetches += hb.KeyFetches
	}
	if keyFetches != int64(fetches) {
		t.Errorf("admin inbound counts %d key fetches, the remote saw %d", keyFetches, fetches)
	}

	// A request whose signature verifies stores its actor.
	b.remote.add("good", key(t, keyRemote))
	b.mustPostAfterThrottle(t, b.as(t, "good"), activity(b.id("follow"), "Follow", b.remote.actor("good"), local.URI))
	if n := b.count(t, `SELECT COUNT(*) FROM remote_actors WHERE uri = ?`, b.remote.actor("good")); n != 1 {
		t.Errorf("the verified actor is stored %d times", n)
	}
}

// mustPostAfterThrottle posts until the answer is not 429 (the budget of a
// minute refills in its minute) and requires 202.
func (b *testBundle) mustPostAfterThrottle(t *testing.T, s signer, act map[string]any) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		status, body := do(t, b.request(t, "/inbox", mustJSON(t, act), s))
		if status == http.StatusAccepted {
			return
		}
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("POST: %d %s", status, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestMissingKeyFetchedOnce: 20 requests naming a key id the actor's
// document does not carry fetch the document once; the failure is
// remembered.
func TestMissingKeyFetchedOnce(t *testing.T) {
	b := setup(t)
	local := b.localActor(t, "ana", false)
	b.remote.add("nokey", key(t, keyRemote))
	s := signer{keyID: b.remote.actor("nokey") + "#other-key", key: key(t, keyRemote)}
	for range 20 {
		status, body := do(t, b.request(t, "/inbox",
			mustJSON(t, activity(b.id("follow"), "Follow", b.remote.actor("nokey"), local.URI)), s))
		if status != http.StatusUnauthorized || !strings.Contains(body, "key not found") {
			t.Fatalf("a key the actor does not carry: %d %s", status, body)
		}
	}
	if n := b.remote.fetchCount("nokey"); n != 1 {
		t.Fatalf("the actor's document fetched %d times for 20 requests naming a key it does not carry", n)
	}
}

// TestRemoteActorsBoundedAndSwept: a remote actor's document over
// store.MaxRemoteActorDocument is not stored, and the sweep deletes actors
// not fetched for the retention.
func TestRemoteActorsBoundedAndSwept(t *testing.T) {
	b := setup(t)
	actor := func(name string) *activitypub.Actor {
		return &activitypub.Actor{ID: b.remote.actor(name), Type: "Person", Inbox: b.remote.actor(name) + "/inbox"}
	}
	big := []byte(`{"id":"` + b.remote.actor("big") + `","pad":"` + strings.Repeat("x", store.MaxRemoteActorDocument) + `"}`)
	if err := b.st.PutRemoteActor(b.ctx, actor("big"), big, time.Now()); store.ErrorCode(err) != store.EINVALID {
		t.Fatalf("a %d-byte actor document: %v, want EINVALID", len(big), err)
	}
	old := time.Now().Add(-31 * 24 * time.Hour)
	for i := range 3 {
		if err := b.st.PutRemoteActor(b.ctx, actor(fmt.Sprintf("old%d", i)), nil, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.st.PutRemoteActor(b.ctx, actor("fresh"), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	n, err := b.importer.SweepRemoteActors(b.ctx)
	if err != nil || n != 3 {
		t.Fatalf("sweep: %d, %v; want 3 deleted", n, err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM remote_actors`); n != 1 {
		t.Fatalf("%d remote actors left, want the fresh one", n)
	}
}
