package inbox_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// TestFediversePayloads posts activities captured from real servers (their
// hosts rewritten to the loopback remote, the objects they name to local
// ones), signed by their actors, and checks that each is accepted and
// imported with the expected outcome.
func TestFediversePayloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	_, local, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	r := b.remote.srv.URL
	// Mitra's Accept answers alice's Follow of its group.
	group := r + "/users/localtestgroup"
	follow, err := b.st.Follow(b.ctx, alice, group)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		file    string
		rewrite []string // old, new pairs, applied in order
		want    string
		check   func(t *testing.T)
	}{
		{"mastodon/follow.json", []string{"https://masto.asonix.dog", r, "https://ds9.lemmy.ml/c/testcom", alice.URI},
			inbox.OutcomeFollowed, func(t *testing.T) {
				if ok, _ := b.st.IsFollower(b.ctx, alice.ID, r+"/users/asonix"); !ok {
					t.Fatal("not a follower")
				}
			}},
		{"mastodon/undo_follow.json", []string{"https://masto.asonix.dog", r, "https://ds9.lemmy.ml/c/testcom", alice.URI},
			inbox.OutcomeUnfollowed, func(t *testing.T) {
				if ok, _ := b.st.IsFollower(b.ctx, alice.ID, r+"/users/asonix"); ok {
					t.Fatal("still a follower")
				}
			}},
		{"pleroma/follow.json", []string{"https://mycrowd.ca", r, "https://lemmy.ca/u/kinetix", alice.URI},
			inbox.OutcomeFollowed, nil},
		{"lemmy/follow.json", []string{"http://ds9.lemmy.ml", r, "http://enterprise.lemmy.ml/c/main", alice.URI},
			inbox.OutcomeFollowed, nil},
		{"mastodon/create_note.json", []string{"https://mastodon.madrid", r}, inbox.OutcomeStored, func(t *testing.T) {
			o, err := b.st.ObjectByURI(b.ctx, r+"/users/felix/statuses/107224289116410645")
			if err != nil || !strings.Contains(o.Content, "thinkpad") || o.InReplyTo == "" {
				t.Fatalf("%+v %v", o, err)
			}
		}},
		{"pleroma/create_note.json", []string{"https://greenish.red", r}, inbox.OutcomeStored, nil},
		{"lemmy/create_page.json", []string{"http://ds9.lemmy.ml", r}, inbox.OutcomeStored, func(t *testing.T) {
			if o, err := b.st.ObjectByURI(b.ctx, r+"/post/1"); err != nil || o.Type != "Page" {
				t.Fatalf("%+v %v", o, err)
			}
		}},
		{"mitra/create_post.json", []string{"https://mitra.social", r}, inbox.OutcomeStored, nil},
		{"mastodon/like_page.json", []string{"https://mastodon.madrid", r, "https://ds9.lemmy.ml/post/147", local.URI},
			inbox.OutcomeCounted, nil},
		{"lemmy/like_note.json", []string{"http://ds9.lemmy.ml/comment/1", local.URI, "http://ds9.lemmy.ml", r},
			inbox.OutcomeCounted, func(t *testing.T) {
				if likes, _, _ := b.st.ReactionCounts(b.ctx, local.URI); likes != 2 {
					t.Fatalf("%d likes", likes)
				}
			}},
		{"mastodon/undo_like_page.json", []string{"https://mastodon.madrid", r, "https://ds9.lemmy.ml/post/147", local.URI},
			inbox.OutcomeUndone, func(t *testing.T) {
				if likes, _, _ := b.st.ReactionCounts(b.ctx, local.URI); likes != 1 {
					t.Fatalf("%d likes", likes)
				}
			}},
		{"mastodon/delete.json", []string{"https://mastodon.madrid", r}, inbox.OutcomeDeleted, nil},
		{"mitra/accept.json", []string{"https://voyager.lemmy.ml/activities/follow/7d782f02-b91d-4455-b6c0-772540f00c2d",
			follow.URI, "https://mitra.social", r}, inbox.OutcomeAnswered, func(t *testing.T) {
			if st, err := b.st.FollowingState(b.ctx, alice.ID, group); err != nil || st != store.StateAccepted {
				t.Fatalf("%q %v", st, err)
			}
		}},
		{"mastodon/flag.json", []string{"https://mastodon.example", r}, inbox.OutcomeUnsupported, nil},
		{"lemmy/delete_user.json", []string{"http://ds9.lemmy.ml", r}, inbox.OutcomeActorGone, func(t *testing.T) {
			if ok, _ := b.st.IsFollower(b.ctx, alice.ID, r+"/u/lemmy_alpha"); ok {
				t.Fatal("a deleted actor still follows")
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "fediverse", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			body := string(raw)
			for i := 0; i+1 < len(tc.rewrite); i += 2 {
				body = strings.ReplaceAll(body, tc.rewrite[i], tc.rewrite[i+1])
			}
			body = withoutProof(t, body)
			var head struct{ ID, Actor string }
			if err := json.Unmarshal([]byte(body), &head); err != nil {
				t.Fatal(err)
			}
			path, ok := strings.CutPrefix(head.Actor, r)
			if !ok {
				t.Fatalf("actor %s not rewritten", head.Actor)
			}
			b.remote.addPath(path, key(t, keyRemote))
			// alice follows each sender, as she would for its posts to
			// reach her: what concerns no one here is not stored.
			if _, err := b.st.FollowingState(b.ctx, alice.ID, head.Actor); err != nil {
				if _, err := b.st.Follow(b.ctx, alice, head.Actor); err != nil {
					t.Fatal(err)
				}
			}
			s := signer{keyID: head.Actor + "#main-key", key: key(t, keyRemote)}
			if status, resp := do(t, b.request(t, "/inbox", []byte(body), s)); status != http.StatusAccepted {
				t.Fatalf("%d %s", status, resp)
			}
			b.drain(t)
			if got := b.outcome(t, head.ID); got != tc.want {
				t.Fatalf("outcome %q, want %q", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}
