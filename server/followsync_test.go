package server

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/courier-ap/courier/store"
)

// TestFollowersSynchronizationCollection: the partial followers collection
// (FEP-8fcf) lists only the followers on the signer's server, whichever
// of its actors signs, to signed GETs only, as one unpaginated
// OrderedCollection; another server sees only its own, or none.
func TestFollowersSynchronizationCollection(t *testing.T) {
	t.Parallel()
	b := setupSigned(t, false)
	one := newPeer(t, peerKey(t, 0), "/users/bob", "/users/carol", "/actor")
	two := newPeer(t, peerKey(t, 1), "/users/dave")
	stranger := newPeer(t, peerKey(t, 2), "/users/eve")
	add := func(uri, state string) {
		t.Helper()
		if err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
			_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: b.alice.ID, URI: uri, Inbox: uri + "/inbox",
				SharedInbox: one.srv.URL + "/inbox", State: state})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	add(one.actor("/users/bob"), store.StateAccepted)
	add(one.actor("/users/carol"), store.StateAccepted)
	add(one.actor("/users/frank"), store.StatePending) // not yet a follower
	add(two.actor("/users/dave"), store.StateAccepted)
	const path = "/users/alice/followers_synchronization"

	for _, tc := range []struct {
		name   string
		signer *peer
		as     string
		key    int
		want   []string
	}{
		{"a follower's server, signed by a follower", one, "/users/bob", 0, []string{one.actor("/users/bob"), one.actor("/users/carol")}},
		{"a follower's server, signed by its instance actor", one, "/actor", 0, []string{one.actor("/users/bob"), one.actor("/users/carol")}},
		{"another follower's server", two, "/users/dave", 1, []string{two.actor("/users/dave")}},
		{"a server with no follower", stranger, "/users/eve", 2, []string{}},
	} {
		r := b.signedGET(t, path, tc.signer.actor(tc.as)+"#main-key", peerKey(t, tc.key))
		if r.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, r.StatusCode, r.Body)
		}
		var c struct {
			ID           string   `json:"id"`
			Type         string   `json:"type"`
			TotalItems   int      `json:"totalItems"`
			OrderedItems []string `json:"orderedItems"`
			First        any      `json:"first"`
		}
		if err := json.Unmarshal(r.Body, &c); err != nil {
			t.Fatal(err)
		}
		if c.ID != b.alice.URI+"/followers_synchronization" || c.Type != "OrderedCollection" || c.First != nil ||
			c.TotalItems != len(tc.want) || !slices.Equal(c.OrderedItems, tc.want) {
			t.Errorf("%s: %s", tc.name, r.Body)
		}
	}
	// Unsigned, or signed with a key that does not verify: 401.
	req, _ := http.NewRequestWithContext(b.ctx, http.MethodGet, b.base+path, nil)
	req.Header.Set("Accept", apJSON)
	if r := b.send(t, req); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d %s", r.StatusCode, r.Body)
	}
	if r := b.signedGET(t, path, stranger.actor("/users/eve")+"#main-key", peerKey(t, 0)); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %d %s", r.StatusCode, r.Body)
	}
	if r := b.signedGET(t, "/users/nobody/followers_synchronization", one.actor("/users/bob")+"#main-key", peerKey(t, 0)); r.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown actor: %d %s", r.StatusCode, r.Body)
	}
}
