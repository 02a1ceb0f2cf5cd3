package app_test

import (
	"database/sql"
	"net/http"
	"slices"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestThreadReplies: a local note's replies collection, as Mastodon 4.5
// walks it, lists the remote reply and the local public reply courier
// holds, and not a followers-only reply to an anonymous reader; the note
// and its local reply name one conversation (context) that resolves to a
// collection of the thread. Pages hold two items: the cursors are walked.
func TestThreadReplies(t *testing.T) {
	t.Parallel()
	r := newQuoteRig(t)
	alice, tok := r.actor(t, "alice", false)
	_, ctok := r.actor(t, "carol", false)
	dave, dtok := r.actor(t, "dave", false)
	root := r.note(t, "alice", tok, nil)
	bob := r.remoteActor("bob")
	remoteReply := r.remote.URL + "/users/bob/statuses/reply"
	create := map[string]any{"@context": activitypub.ActivityStreams, "id": r.id("create"), "type": "Create", "actor": bob,
		"to": []string{activitypub.Public}, "cc": []string{alice.URI}, "object": map[string]any{"id": remoteReply,
			"type": "Note", "attributedTo": bob, "content": "remote reply", "inReplyTo": root,
			"to": []string{activitypub.Public}, "cc": []string{alice.URI}}}
	r.post(t, create)
	if got := r.outcome(t, create["id"].(string)); got != "stored" {
		t.Fatalf("Create outcome %q", got)
	}
	localReply := r.note(t, "carol", ctok, map[string]any{"inReplyTo": root})
	status, act := r.c2s(t, "dave", dtok, map[string]any{"type": "Note", "content": "for followers", "inReplyTo": root,
		"to": []string{r.base + "/users/dave/followers"}})
	if status != http.StatusCreated {
		t.Fatalf("followers-only reply: %d %v", status, act)
	}
	hidden := act["object"].(map[string]any)["id"].(string)

	_, doc := r.fetch(t, root)
	replies, _ := doc["replies"].(map[string]any)
	if replies == nil || replies["id"] != root+"/replies" || replies["totalItems"] != float64(2) {
		t.Fatalf("replies %v", doc["replies"])
	}
	ids := r.walk(t, replies["first"].(string), "")
	if !slices.Equal(ids, []string{remoteReply, localReply}) {
		t.Errorf("replies %v, want %v (not %s)", ids, []string{remoteReply, localReply}, hidden)
	}

	// A server one of whose actors follows dave sees dave's reply too.
	if err := r.db.Tx(r.ctx, func(tx *sql.Tx) error {
		_, err := r.st.AddFollowerTx(r.ctx, tx, store.Follower{ActorID: dave.ID, URI: bob, Inbox: bob + "/inbox",
			State: store.StateAccepted})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ids := r.walk(t, replies["first"].(string), bob); !slices.Equal(ids, []string{remoteReply, localReply, hidden}) {
		t.Errorf("replies to a follower's server: %v", ids)
	}

	conv, _ := doc["context"].(string)
	if conv != r.base+"/contexts/"+root[len(r.base+"/objects/"):] {
		t.Fatalf("root context %q", conv)
	}
	if _, d := r.fetch(t, localReply); d["context"] != conv {
		t.Errorf("local reply's context %v, want %s", d["context"], conv)
	}
	status, c := r.fetch(t, conv)
	if status != http.StatusOK || c["type"] != "OrderedCollection" {
		t.Fatalf("context: %d %v", status, c)
	}
	if ids := r.walk(t, c["first"].(string), ""); !slices.Equal(ids, []string{root, remoteReply, localReply}) {
		t.Errorf("conversation %v", ids)
	}
}

// walk reads the pages of a collection from first, following next, signed
// by signer ("": unsigned), and returns the ids listed.
func (r *quoteRig) walk(t *testing.T, first, signer string) []string {
	t.Helper()
	var ids []string
	for url, n := first, 0; url != ""; n++ {
		if n > 10 {
			t.Fatalf("more than 10 pages from %s", first)
		}
		status, page := r.fetchAs(t, url, signer)
		if status != http.StatusOK || page["type"] != "OrderedCollectionPage" {
			t.Fatalf("GET %s: %d %v", url, status, page)
		}
		for _, v := range page["orderedItems"].([]any) {
			ids = append(ids, v.(string))
		}
		url, _ = page["next"].(string)
	}
	return ids
}
