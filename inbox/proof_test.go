package inbox_test

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
)

// addEd gives remote actor name an Ed25519 key, published as a FEP-521a
// Multikey {actor}#ed25519-key in its assertionMethod, and returns it.
func (r *remote) addEd(t testing.TB, name string) ed25519.PrivateKey {
	t.Helper()
	k, err := activitypub.GenerateEd25519Key()
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actors["/users/"+name].ed = k
	return k
}

// signedCreate returns a Create by actor of a note addressed to to, with
// an eddsa-jcs-2022 proof made with ed, as courier builds its own.
func signedCreate(t testing.TB, id, actor string, ed ed25519.PrivateKey, content string, to ...string) []byte {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Second)
	n := note(id+"/note", actor, map[string]any{"content": content, "to": to})
	doc := map[string]any{
		"@context": activitypub.WithDataIntegrity(nil), "id": id, "type": "Create", "actor": actor,
		"object": n, "to": to, "published": at.Format(time.RFC3339),
	}
	signed, err := activitypub.AddProof(mustJSON(t, doc), activitypub.Ed25519KeyID(actor), ed, at)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// TestProofTamperedCreateRefused: a Create whose content was changed after
// its FEP-8b32 proof was made is refused 401 naming the proof, even though
// its HTTP signature (made over the changed bytes) verifies, and nothing is
// recorded; the untouched Create is accepted.
func TestProofTamperedCreateRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	ed := b.remote.addEd(t, "bob")
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")

	id := b.id("create")
	body := signedCreate(t, id, bob, ed, "<p>I owe you 10 euros</p>", activitypub.Public, alice.URI)
	tampered := bytes.Replace(body, []byte("10 euros"), []byte("1000 euros"), 1)
	if bytes.Equal(tampered, body) {
		t.Fatal("the test changed nothing")
	}
	status, resp := do(t, b.request(t, "/inbox", tampered, b.as(t, "bob")))
	if status != http.StatusUnauthorized || !strings.Contains(resp, "integrity proof") {
		t.Fatalf("tampered Create: %d %s, want 401 naming the integrity proof", status, resp)
	}
	if n := b.result(t, "bad_proof"); n != 1 {
		t.Fatalf("bad_proof counted %d times, want 1", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities WHERE activity_id = ?`, id); n != 0 {
		t.Fatalf("the tampered Create was recorded (%d rows)", n)
	}

	// A proof of a cryptosuite courier does not know is not judged; a
	// proof whose value is not a signature is refused.
	bogus := bytes.Replace(body, []byte(`"proofValue":"z`), []byte(`"proofValue":"x`), 1)
	if status, resp := do(t, b.request(t, "/inbox", bogus, b.as(t, "bob"))); status != http.StatusUnauthorized {
		t.Fatalf("malformed proofValue: %d %s, want 401", status, resp)
	}

	if status, resp := do(t, b.request(t, "/inbox", body, b.as(t, "bob"))); status != http.StatusAccepted {
		t.Fatalf("the untouched Create: %d %s", status, resp)
	}
	b.drain(t)
	if got := b.outcome(t, id); got != inbox.OutcomeStored {
		t.Fatalf("outcome %q, want %q", got, inbox.OutcomeStored)
	}
}

// TestProofForwardedAccepted: bob's Create, carrying bob's FEP-8b32 proof,
// delivered by carol of another host (a forward: the HTTP signer is not the
// actor) is accepted on the proof and imported, without courier fetching
// the activity or its note from bob's host. The same forward without a
// proof is refused 401 as before.
func TestProofForwardedAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	ed := b.remote.addEd(t, "bob")
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	third := newRemote(t)
	third.add("carol", key(t, keyStranger))
	asCarol := signer{keyID: third.keyID("carol"), key: key(t, keyStranger)}

	// Unproved, a forward is refused.
	plain := b.id("create")
	unproved := mustJSON(t, activity(plain, "Create", bob, note(plain+"/note", bob, map[string]any{
		"to": []string{activitypub.Public, alice.URI}})))
	if status, resp := do(t, b.request(t, "/inbox", unproved, asCarol)); status != http.StatusUnauthorized ||
		!strings.Contains(resp, "not the signing key's owner") {
		t.Fatalf("forward without a proof: %d %s, want 401", status, resp)
	}

	id := b.id("create")
	body := signedCreate(t, id, bob, ed, "<p>forwarded words</p>", activitypub.Public, alice.URI)
	if status, resp := do(t, b.request(t, "/inbox", body, asCarol)); status != http.StatusAccepted {
		t.Fatalf("forward with bob's proof: %d %s, want 202", status, resp)
	}
	b.drain(t)
	if got := b.outcome(t, id); got != inbox.OutcomeStored {
		t.Fatalf("outcome %q, want %q", got, inbox.OutcomeStored)
	}
	o, err := b.st.ObjectByURI(b.ctx, id+"/note")
	if err != nil || !strings.Contains(string(o.Document), "forwarded words") {
		t.Fatalf("the forwarded note: %v, %v", o, err)
	}
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	b.remote.mu.Lock()
	refetched := b.remote.fetches[u.Path] + b.remote.fetches[u.Path+"/note"]
	b.remote.mu.Unlock()
	if refetched != 0 {
		t.Fatalf("the activity or its note was fetched %d times from its origin", refetched)
	}
}
