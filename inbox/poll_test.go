package inbox_test

import (
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// vote is a vote as Mastodon sends it: a Create of a Note whose name is
// the option, inReplyTo the poll, addressed to the poll's author.
func vote(b *testBundle, voter, poll, author, option string) map[string]any {
	id := b.id("vote")
	n := map[string]any{"id": id + "/note", "type": "Note", "name": option, "attributedTo": voter,
		"inReplyTo": poll, "to": []string{author}}
	a := activity(id, "Create", voter, n)
	a["to"] = []string{author}
	return a
}

// TestPollVotesCounted: remote votes on a local Question are counted per
// option (one per voter on a oneOf poll), served as each option's
// replies.totalItems and votersCount, and the poll's new counts federated
// as one Update for the votes of a minute; votes that cannot count are not.
func TestPollVotesCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	question := func(key string, extra map[string]any) *store.Object {
		props := map[string]any{"content": "tea or coffee?",
			key: []any{map[string]any{"type": "Note", "name": "tea"}, map[string]any{"type": "Note", "name": "coffee"}}}
		for k, v := range extra {
			props[k] = v
		}
		_, o, err := b.st.CreateObject(b.ctx, alice, store.ObjectInput{Type: "Question", Content: "tea or coffee?",
			To: []string{store.Public}, CC: []string{b.st.URIs().Followers("alice")}, Properties: props})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	one := question("oneOf", nil)
	anyOf := question("anyOf", nil)
	closed := question("oneOf", map[string]any{"endTime": "2020-01-01T00:00:00Z"})
	for _, n := range []string{"v1", "v2", "v3"} {
		b.remote.add(n, key(t, keyRemote))
	}
	cast := func(voter, poll, option, want string) {
		t.Helper()
		a := vote(b, b.remote.actor(voter), poll, alice.URI, option)
		b.mustPost(t, b.as(t, voter), a)
		waitOutcome(t, b, a["id"].(string), want)
	}
	cast("v1", one.URI, "tea", inbox.OutcomeVoted)
	cast("v2", one.URI, "tea", inbox.OutcomeVoted)
	cast("v3", one.URI, "coffee", inbox.OutcomeVoted)
	cast("v1", one.URI, "coffee", inbox.OutcomeNoMatch) // one answer per voter
	cast("v2", one.URI, "milk", inbox.OutcomeNoMatch)   // no such option
	cast("v1", anyOf.URI, "tea", inbox.OutcomeVoted)
	cast("v1", anyOf.URI, "coffee", inbox.OutcomeVoted)
	cast("v1", anyOf.URI, "coffee", inbox.OutcomeNoMatch)
	cast("v1", closed.URI, "tea", inbox.OutcomeNoMatch)
	// A named reply to what is not a poll is a reply, stored as such.
	_, plain, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	cast("v2", plain.URI, "a titled reply", inbox.OutcomeStored)

	for _, tc := range []struct {
		o                   *store.Object
		tea, coffee, voters int
	}{{one, 2, 1, 3}, {anyOf, 1, 1, 1}, {closed, 0, 0, 0}} {
		c, err := b.st.PollCounts(b.ctx, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if c["tea"] != tc.tea || c["coffee"] != tc.coffee || c[""] != tc.voters {
			t.Fatalf("%s: counts %v", tc.o.URI, c)
		}
	}
	// Votes are not stored as notes.
	if n := b.count(t, `SELECT COUNT(*) FROM objects WHERE in_reply_to IN (?, ?)`, one.URI, anyOf.URI); n != 0 {
		t.Fatalf("%d votes stored as notes", n)
	}
	// An Update per poll voted on, due at the end of the minute of its
	// votes (store.TestPollUpdatesDebounced holds one per minute; here the
	// votes may straddle a minute's end).
	if n := b.count(t, `SELECT COUNT(DISTINCT payload) FROM event_queue_payloads WHERE type = ?`, store.EventPollUpdate); n != 2 {
		t.Fatalf("poll updates scheduled for %d polls, want 2 (one per poll voted on)", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ? AND next_attempt_at % 60000 <> 0`, store.EventPollUpdate); n != 0 {
		t.Fatalf("%d poll updates not due at a minute's end", n)
	}
	// Made due, the handler federates the counts.
	if _, err := b.db.Write.Exec(`UPDATE event_queue SET next_attempt_at = 0 WHERE type = ?`, store.EventPollUpdate); err != nil {
		t.Fatal(err)
	}
	var doc string
	waitFor(t, "the poll's Update", func() bool {
		return b.db.Read.QueryRow(`SELECT document FROM activities WHERE type = 'Update' AND object_uri = ?`, one.URI).Scan(&doc) == nil
	})
	act, err := activitypub.ParseActivity([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		VotersCount int `json:"votersCount"`
		OneOf       []struct {
			Name    string
			Replies struct{ TotalItems int } `json:"replies"`
		} `json:"oneOf"`
	}
	if err := json.Unmarshal(act.Object.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.VotersCount != 3 || len(obj.OneOf) != 2 || obj.OneOf[0].Replies.TotalItems != 2 || obj.OneOf[1].Replies.TotalItems != 1 {
		t.Fatalf("Update %s", doc)
	}
	if !hasString(act.To, store.Public) || !hasString(act.Cc, b.st.URIs().Followers("alice")) {
		t.Fatalf("Update addressed to %v %v", act.To, act.Cc)
	}
}

// TestPollVotesAudience: a poll that is not public counts the votes of its
// audience only: on a followers-only poll an accepted follower's and an
// addressed actor's, on a direct poll the addressed actor's; the vote of
// an actor neither addressed nor following is refused, on either.
func TestPollVotesAudience(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	for _, n := range []string{"fan", "guest", "stranger"} {
		b.remote.add(n, key(t, keyRemote))
	}
	fan, guest := b.remote.actor("fan"), b.remote.actor("guest")
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: alice.ID, URI: fan, Inbox: fan + "/inbox"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	poll := func(to ...string) *store.Object {
		props := map[string]any{"content": "tea or coffee?",
			"oneOf": []any{map[string]any{"type": "Note", "name": "tea"}, map[string]any{"type": "Note", "name": "coffee"}}}
		_, o, err := b.st.CreateObject(b.ctx, alice, store.ObjectInput{Type: "Question", Content: "tea or coffee?",
			To: to, Properties: props})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	followersOnly := poll(b.st.URIs().Followers("alice"), guest)
	direct := poll(guest)
	cast := func(voter string, poll *store.Object, counted bool) {
		t.Helper()
		a := vote(b, b.remote.actor(voter), poll.URI, alice.URI, "tea")
		b.mustPost(t, b.as(t, voter), a)
		var got string
		waitFor(t, "outcome of "+a["id"].(string), func() bool {
			var o *string
			err := b.db.Read.QueryRow(`SELECT outcome FROM inbox_activities WHERE activity_id = ?`, a["id"]).Scan(&o)
			if err == nil && o != nil {
				got = *o
			}
			return got != ""
		})
		if counted != (got == inbox.OutcomeVoted) || !counted && !strings.HasPrefix(got, "refused") {
			t.Errorf("%s's vote on %s: %q", voter, poll.Visibility, got)
		}
	}
	cast("fan", followersOnly, true)
	cast("guest", followersOnly, true)
	cast("stranger", followersOnly, false)
	cast("fan", direct, false)
	cast("guest", direct, true)
	cast("stranger", direct, false)
	for _, tc := range []struct {
		o   *store.Object
		tea int
	}{{followersOnly, 2}, {direct, 1}} {
		c, err := b.st.PollCounts(b.ctx, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if c["tea"] != tc.tea {
			t.Errorf("%s poll: counts %v, want tea %d", tc.o.Visibility, c, tc.tea)
		}
	}
}

func hasString(l []string, v string) bool {
	for _, e := range l {
		if e == v {
			return true
		}
	}
	return false
}

func waitOutcome(t *testing.T, b *testBundle, id, want string) {
	t.Helper()
	var got string
	waitFor(t, "outcome of "+id, func() bool {
		var o *string
		if err := b.db.Read.QueryRow(`SELECT outcome FROM inbox_activities WHERE activity_id = ?`, id).Scan(&o); err != nil || o == nil {
			return false
		}
		got = *o
		return true
	})
	if got != want {
		t.Fatalf("%s: outcome %q, want %q", id, got, want)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
