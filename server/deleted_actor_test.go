package server

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

// wantActorTombstone asserts that the actor document of name answers 410
// Gone with its Tombstone, and WebFinger 410 for it, over real HTTP.
func wantActorTombstone(t *testing.T, b *testBundle, name string) {
	t.Helper()
	r := b.get(t, "/users/"+name)
	wantStatus(t, r, http.StatusGone)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, apJSON) {
		t.Fatalf("Tombstone content type %q", ct)
	}
	doc := r.json(t)
	if doc["@context"] != activitypub.ActivityStreams || doc["id"] != b.base+"/users/"+name || doc["type"] != "Tombstone" ||
		doc["formerType"] != "Person" || doc["deleted"] != "2026-11-30T12:00:00Z" {
		t.Fatalf("Tombstone %s", r.Body)
	}
	if _, ok := doc["publicKey"]; ok {
		t.Fatalf("the Tombstone carries the key: %s", r.Body)
	}
	wf := b.get(t, "/.well-known/webfinger?resource="+url.QueryEscape("acct:"+name+"@"+strings.TrimPrefix(b.base, "http://")))
	wantStatus(t, wf, http.StatusGone)
	if !strings.Contains(string(wf.Body), "deleted") {
		t.Fatalf("WebFinger of a deleted actor: %s", wf.Body)
	}
	// The HTML profile is gone too.
	wantStatus(t, b.do(t, http.MethodGet, "/users/"+name, nil, "Accept", "text/html"), http.StatusGone)
}

// TestDeletedActorAnswersGone: once `courier actor delete` ran, while the
// actor's Delete is still to be delivered (its row and key stay), its URL
// answers 410 with a Tombstone (formerType Person) and WebFinger 410; an
// actor never created still gets 404; the name cannot be given to a new
// actor, through the command (exit 1, one line on stderr) or the store.
func TestDeletedActorAnswersGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.actor(t, "bob")
	wantStatus(t, b.get(t, "/users/bob"), http.StatusOK)
	if _, err := b.st.DeleteActor(b.ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM actors WHERE name = 'bob'`); n != 1 {
		t.Fatalf("%d rows of bob, want the one kept for the Delete's deliveries", n)
	}
	wantActorTombstone(t, b, "bob")
	wantStatus(t, b.get(t, "/users/nobody"), http.StatusNotFound)
	wantStatus(t, b.get(t, "/.well-known/webfinger?resource="+url.QueryEscape("acct:nobody@"+strings.TrimPrefix(b.base, "http://"))), http.StatusNotFound)
	// alice is untouched.
	wantStatus(t, b.get(t, "/users/alice"), http.StatusOK)

	var out, errOut bytes.Buffer
	if code := CreateActorCommand(b.ctx, b.st, []string{"bob"}, &out, &errOut); code != 1 || out.Len() != 0 ||
		strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), "deleted actor") {
		t.Fatalf("create bob again: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	wantActorTombstone(t, b, "bob")
}
