package inbox_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
)

// syncPeer is a remote server on loopback (an origin) whose actor felix
// publishes a followers collection and serves, to courier's signed GETs,
// the partial collection listed.
type syncPeer struct {
	o              *origin
	felix, partial string
}

func newSyncPeer(t *testing.T, b *testBundle, listed ...string) *syncPeer {
	t.Helper()
	o := newOrigin(t)
	felix := o.srv.URL + "/users/felix"
	pem, err := activitypub.EncodePublicKeyPEM(&key(t, keyRemote).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	o.serve("/users/felix", mustJSON(t, map[string]any{
		"@context": []string{activitypub.ActivityStreams, activitypub.SecurityContext},
		"id":       felix, "type": "Person", "inbox": felix + "/inbox", "followers": felix + "/followers",
		"endpoints": map[string]string{"sharedInbox": o.srv.URL + "/inbox"},
		"publicKey": map[string]string{"id": felix + "#main-key", "owner": felix, "publicKeyPem": pem},
	}))
	p := &syncPeer{o: o, felix: felix, partial: felix + "/followers_synchronization"}
	p.list(t, listed...)
	return p
}

// list makes the partial collection list ids.
func (p *syncPeer) list(t *testing.T, ids ...string) {
	if ids == nil {
		ids = []string{}
	}
	p.o.serve("/users/felix/followers_synchronization", mustJSON(t, map[string]any{
		"@context": activitypub.ActivityStreams, "id": p.partial, "type": "OrderedCollection",
		"totalItems": len(ids), "orderedItems": ids}))
}

// header is felix's Collection-Synchronization header with the digest of
// ids.
func (p *syncPeer) header(ids ...string) string {
	return activitypub.CollectionSync{CollectionID: p.felix + "/followers", URL: p.partial,
		Digest: activitypub.FollowersDigest(ids)}.String()
}

// post sends a followers-only Create by felix to the shared inbox with the
// header h, covered by the signature unless unsigned.
func (p *syncPeer) post(t *testing.T, b *testBundle, h string, unsigned bool) {
	t.Helper()
	id := p.o.id("create")
	act := activity(id, "Create", p.felix, note(p.o.srv.URL+"/notes/"+id[len(id)-3:], p.felix,
		map[string]any{"to": []string{p.felix + "/followers"}}))
	act["to"] = []string{p.felix + "/followers"}
	body := mustJSON(t, act)
	req, err := http.NewRequest(http.MethodPost, b.base+"/inbox", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if !unsigned {
		req.Header.Set(activitypub.CollectionSyncHeader, h)
	}
	if err := activitypub.SignRequest(req, body, p.felix+"#main-key", key(t, keyRemote), time.Now()); err != nil {
		t.Fatal(err)
	}
	if unsigned {
		req.Header.Set(activitypub.CollectionSyncHeader, h)
	}
	if status, out := do(t, req); status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", status, out)
	}
}

// syncs returns courier_inbox_followers_sync_total{result}.
func (b *testBundle) syncs(t *testing.T, result string) int {
	t.Helper()
	mfs, err := b.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "courier_inbox_followers_sync_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// followTarget makes local actor a follow target in state (pending or
// accepted).
func (b *testBundle) followTarget(t *testing.T, a *store.Actor, target, state string) {
	t.Helper()
	b.follow(t, a, target)
	if state == store.StateAccepted {
		if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			_, err := b.st.SetFollowingStateTx(b.ctx, tx, store.FollowingRef{Target: target, LocalActor: a.URI}, state)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// activitiesOf returns the documents of local actor a's activities of type
// typ.
func (b *testBundle) activitiesOf(t *testing.T, a *store.Actor, typ string) []map[string]any {
	t.Helper()
	rows, err := b.db.Read.Query(`SELECT document FROM activities WHERE actor_uri = ? AND type = ? ORDER BY id`, a.URI, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var doc string
		var m map[string]any
		if err := rows.Scan(&doc); err != nil || json.Unmarshal([]byte(doc), &m) != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		out = append(out, m)
	}
	return out
}

// TestFollowersSyncRepairs: felix's server lists bob and carol as its
// followers here, with the digest of that list, while courier holds alice's
// accepted follow, bob's pending one and none of carol's. courier fetches
// the partial collection once (signed), sends alice's Follow again, takes
// bob's as accepted and sends carol's Undo of a Follow of felix. A second
// mismatching header in the same window fetches nothing more.
func TestFollowersSyncRepairs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice, bob, carol := b.localActor(t, "alice", false), b.localActor(t, "bob", false), b.localActor(t, "carol", false)
	p := newSyncPeer(t, b, bob.URI, carol.URI)
	b.followTarget(t, alice, p.felix, store.StateAccepted)
	b.followTarget(t, bob, p.felix, store.StatePending)

	p.post(t, b, p.header(bob.URI, carol.URI), false)
	b.drain(t)
	if n := p.o.count("/users/felix/followers_synchronization"); n != 1 {
		t.Fatalf("partial collection fetched %d times, want 1", n)
	}
	follows := b.activitiesOf(t, alice, "Follow")
	if len(follows) != 2 || follows[1]["object"] != p.felix || follows[1]["id"] == follows[0]["id"] {
		t.Fatalf("alice's Follows %v, want hers sent again", follows)
	}
	if st, err := b.st.FollowingState(b.ctx, bob.ID, p.felix); err != nil || st != store.StateAccepted {
		t.Fatalf("bob's follow %q, %v; want accepted", st, err)
	}
	undos := b.activitiesOf(t, carol, "Undo")
	if len(undos) != 1 {
		t.Fatalf("carol's Undos %v, want 1", undos)
	}
	if o, _ := undos[0]["object"].(map[string]any); o["type"] != "Follow" || o["actor"] != carol.URI || o["object"] != p.felix {
		t.Fatalf("carol's Undo %v", undos[0])
	}
	if got := b.activitiesOf(t, bob, "Undo"); len(got) != 0 {
		t.Fatalf("bob's Undos %v", got)
	}
	if b.syncs(t, inbox.SyncRequested) != 1 || b.syncs(t, inbox.SyncRepaired) != 1 {
		t.Fatalf("requested %d, repaired %d", b.syncs(t, inbox.SyncRequested), b.syncs(t, inbox.SyncRepaired))
	}

	// Still differing (alice and bob here, bob and carol there), within the
	// window: no second sync.
	p.post(t, b, p.header(bob.URI, carol.URI), false)
	b.drain(t)
	if n := p.o.count("/users/felix/followers_synchronization"); n != 1 {
		t.Fatalf("partial collection fetched %d times within one window", n)
	}
}

// TestFollowersSyncNoAction: a header whose digest is courier's, or one the
// signature does not cover, fetches nothing; a fetch that fails (503)
// changes nothing, not even what the list would have undone; a list that
// is not the header's (another digest) undoes nothing.
func TestFollowersSyncNoAction(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	b := setup(t, options{now: clock.now})
	alice, carol := b.localActor(t, "alice", false), b.localActor(t, "carol", false)
	p := newSyncPeer(t, b, carol.URI)
	b.followTarget(t, alice, p.felix, store.StateAccepted)
	const path = "/users/felix/followers_synchronization"

	p.post(t, b, p.header(alice.URI), false) // in sync
	p.post(t, b, p.header(carol.URI), true)  // not signed
	b.drain(t)
	if n := p.o.count(path); n != 0 || b.syncs(t, inbox.SyncInSync) != 1 || b.syncs(t, inbox.SyncIgnored) != 1 {
		t.Fatalf("fetches %d, in_sync %d, ignored %d", n, b.syncs(t, inbox.SyncInSync), b.syncs(t, inbox.SyncIgnored))
	}

	p.o.failNext(path, 100)
	p.post(t, b, p.header(carol.URI), false)
	b.drain(t)
	if n := p.o.count(path); n != 1 || b.syncs(t, inbox.SyncFetchFailed) != 1 {
		t.Fatalf("fetches %d, fetch_failed %d", n, b.syncs(t, inbox.SyncFetchFailed))
	}
	if len(b.activitiesOf(t, alice, "Follow")) != 1 || len(b.activitiesOf(t, carol, "Undo")) != 0 {
		t.Fatalf("a failed fetch changed follows: %v %v", b.activitiesOf(t, alice, "Follow"), b.activitiesOf(t, carol, "Undo"))
	}
	if st, err := b.st.FollowingState(b.ctx, alice.ID, p.felix); err != nil || st != store.StateAccepted {
		t.Fatalf("alice's follow %q, %v", st, err)
	}

	// Next window: the list (carol) is not what the header's digest says
	// (carol and someone else): nothing is undone.
	p.o.failNext(path, 0)
	clock.advance(inbox.DefaultFollowersSync)
	p.post(t, b, p.header(carol.URI, b.base+"/users/ghost"), false)
	b.drain(t)
	if n := p.o.count(path); n != 2 || b.syncs(t, inbox.SyncDigestMismatch) != 1 {
		t.Fatalf("fetches %d, digest_mismatch %d", n, b.syncs(t, inbox.SyncDigestMismatch))
	}
	if len(b.activitiesOf(t, carol, "Undo")) != 0 {
		t.Fatal("an Undo sent on a list that is not the header's")
	}
}
