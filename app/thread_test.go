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
// collection of the thread.
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
	status, page := r.fetch(t, replies["first"].(string))
	if status != http.StatusOK {
		t.Fatalf("replies page: %d %v", status, page)
	}
	var ids []string
	for _, v := range page["orderedItems"].([]any) {
		ids = append(ids, v.(string))
	}
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
	status, page = r.fetchAs(t, replies["first"].(string), bob)
	ids = ids[:0]
	for _, v := range page["orderedItems"].([]any) {
		ids = append(ids, v.(string))
	}
	if status != http.StatusOK || !slices.Equal(ids, []string{remoteReply, localReply, hidden}) {
		t.Errorf("replies to a follower's server: %d %v", status, ids)
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
	_, cp := r.fetch(t, c["first"].(string))
	ids = ids[:0]
	for _, v := range cp["orderedItems"].([]any) {
		ids = append(ids, v.(string))
	}
	if !slices.Equal(ids, []string{root, remoteReply, localReply}) {
		t.Errorf("conversation %v", ids)
	}
}
