package delivery_test

import (
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store/notetest"
)

// TestFollowersOnlyDeliveryCarriesCollectionSync: the delivery of a
// followers-only note to a shared inbox carries a signed
// Collection-Synchronization header (FEP-8fcf) whose digest is that of the
// actor's followers on that server, the only ones its partial collection
// lists; the deliveries to personal inboxes and of a public note carry
// none. The remotes verify every signature, the header included.
func TestFollowersOnlyDeliveryCarriesCollectionSync(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	shared := newRemote(t, b.keys, b.clock, true)
	other := newRemote(t, b.keys, b.clock, true)
	personal := newRemote(t, b.keys, b.clock, false)
	shared.follow(b, alice, "s1")
	shared.follow(b, alice, "s2")
	other.follow(b, alice, "o1")
	personal.follow(b, alice, "p1")
	followers := b.st.URIs().Followers("alice")
	private, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "friends only", To: []string{followers}})
	if err != nil {
		t.Fatal(err)
	}
	public, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "everyone",
		To: []string{activitypub.Public}, CC: []string{followers}})
	if err != nil {
		t.Fatal(err)
	}
	b.startWorker(4)
	b.waitTicking("deliveries done", func() bool {
		rows := b.rows(delivery.EventPost)
		for _, r := range rows {
			if r.Status != outbox.StatusDone {
				return false
			}
		}
		return len(rows) == 6
	})
	for _, tc := range []struct {
		rm  *remote
		ids []string
	}{
		{shared, []string{shared.actorURL("s1"), shared.actorURL("s2")}},
		{other, []string{other.actorURL("o1")}},
	} {
		want := activitypub.CollectionSync{CollectionID: followers, URL: alice.URI + "/followers_synchronization",
			Digest: activitypub.FollowersDigest(tc.ids)}.String()
		got := tc.rm.received()
		if len(got) != 2 {
			t.Fatalf("%s got %d POSTs, want 2", tc.rm.URL(), len(got))
		}
		for _, r := range got {
			switch r.ActivityID {
			case private.URI:
				if r.Sync != want {
					t.Errorf("%s: followers-only delivery header %q, want %q", tc.rm.URL(), r.Sync, want)
				}
			case public.URI:
				if r.Sync != "" {
					t.Errorf("%s: public delivery carries %q", tc.rm.URL(), r.Sync)
				}
			}
		}
	}
	for _, r := range personal.received() {
		if r.Sync != "" {
			t.Errorf("personal inbox %s got %q", r.Path, r.Sync)
		}
	}
}
