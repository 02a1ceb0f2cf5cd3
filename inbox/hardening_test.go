package inbox_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// TestIrrelevantActivitiesIgnored: 40 Creates of about 100 KB from an
// actor no one here follows, addressed only to as:Public, are answered 202
// and store nothing (no activity, object or event), only a count; what
// concerns someone here is stored: a followed sender's post, a post
// mentioning or addressed to a local actor, a reply to a local note, a
// Follow of a local actor, a Like of a local note, the Delete of a held
// object, the Undo of a held Like.
func TestIrrelevantActivitiesIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("stranger", key(t, keyRemote))
	b.remote.add("friend", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	stranger, friend := b.remote.actor("stranger"), b.remote.actor("friend")
	asStranger, asFriend := b.as(t, "stranger"), b.as(t, "friend")
	_, mine, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "mine", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Follow(b.ctx, alice, friend); err != nil {
		t.Fatal(err)
	}
	b.drain(t)
	objectsBefore := b.count(t, `SELECT COUNT(*) FROM objects`)
	eventsBefore := b.count(t, `SELECT COUNT(*) FROM event_queue`)

	big := strings.Repeat("<p>spam spam spam</p>", 100<<10/21)
	for range 40 {
		id := b.id("create")
		b.mustPost(t, asStranger, activity(id, "Create", stranger, note(id+"/note", stranger, map[string]any{"content": big})))
	}
	b.drain(t)
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities`); n != 0 {
		t.Fatalf("%d activities stored that concern no one here", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM objects`) - objectsBefore; n != 0 {
		t.Fatalf("%d objects stored that concern no one here", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue`) - eventsBefore; n != 0 {
		t.Fatalf("%d events for activities that concern no one here", n)
	}
	if n := b.result(t, "ignored"); n != 40 {
		t.Fatalf("ignored counted %d times, want 40", n)
	}
	var ignored int64
	for _, h := range b.handler.HostBudgets() {
		ignored += h.Ignored
	}
	if ignored != 40 {
		t.Fatalf("the host view counts %d ignored, want 40", ignored)
	}

	// What concerns someone here is stored and imported.
	followedPost := b.id("create")
	mention := b.id("create")
	addressed := b.id("create")
	reply := b.id("create")
	follow := b.id("follow")
	like := b.id("like")
	cases := map[string]map[string]any{
		followedPost: activity(followedPost, "Create", friend, note(followedPost+"/note", friend, nil)),
		mention: activity(mention, "Create", stranger, note(mention+"/note", stranger, map[string]any{
			"tag": []map[string]string{{"type": "Mention", "href": alice.URI}}})),
		addressed: activity(addressed, "Create", stranger, note(addressed+"/note", stranger, map[string]any{
			"to": []string{alice.URI}})),
		reply: activity(reply, "Create", stranger, note(reply+"/note", stranger, map[string]any{
			"inReplyTo": mine.URI})),
		follow: activity(follow, "Follow", stranger, alice.URI),
		like:   activity(like, "Like", stranger, mine.URI),
	}
	for id, a := range cases {
		s := asStranger
		if a["actor"] == friend {
			s = asFriend
		}
		b.mustPost(t, s, a)
		_ = id
	}
	b.drain(t)
	for id := range cases {
		if got := b.outcome(t, id); got == "" || got == inbox.OutcomeIgnored {
			t.Errorf("%s: outcome %q, want it imported", id, got)
		}
	}
	// The Delete of a held object and the Undo of a held Like, from a
	// sender no one follows, addressed to no one here.
	del, undo := b.id("delete"), b.id("undo")
	b.mustPost(t, asStranger, activity(del, "Delete", stranger, reply+"/note"))
	b.mustPost(t, asStranger, activity(undo, "Undo", stranger, like))
	b.drain(t)
	if got := b.outcome(t, del); got != inbox.OutcomeDeleted {
		t.Errorf("Delete of a held object: %q", got)
	}
	if got := b.outcome(t, undo); got != inbox.OutcomeUndone {
		t.Errorf("Undo of a held Like: %q", got)
	}
	if n := b.result(t, "ignored"); n != 40 {
		t.Fatalf("ignored counted %d times after the relevant ones, want still 40", n)
	}
}

// TestStoredOnce: a note of about 200 KB is kept once: after its import
// the activity's copy is gone (its row stays, to recognise a redelivery),
// the object's text lives in its document only, and reading the object
// gives its content back.
func TestStoredOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	asBob := b.as(t, "bob")
	content := strings.Repeat("a long note. ", 200<<10/13) // no character JSON escapes
	id := b.id("create")
	a := activity(id, "Create", bob, note(id+"/note", bob, map[string]any{"content": content, "summary": "cw"}))
	a["cc"] = []string{alice.URI}
	b.mustPost(t, asBob, a)
	b.drain(t)
	if got := b.outcome(t, id); got != inbox.OutcomeStored {
		t.Fatalf("outcome %q", got)
	}
	var stored int
	if err := b.db.Read.QueryRow(`SELECT
		(SELECT COALESCE(SUM(length(document)), 0) FROM inbox_activities) +
		(SELECT COALESCE(SUM(length(document) + length(content) + length(summary)), 0) FROM objects WHERE actor_id IS NULL)`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored < len(content) || stored > len(content)+len(content)/10 {
		t.Fatalf("%d bytes stored for a note of %d: want it once", stored, len(content))
	}
	o, err := b.st.ObjectByURI(b.ctx, id+"/note")
	if err != nil || o.Content != content || o.Summary != "cw" {
		t.Fatalf("object read back: content of %d bytes, summary %q, %v", len(o.Content), o.Summary, err)
	}
	// A redelivery is still recognised.
	b.mustPost(t, asBob, a)
	if n := b.result(t, "duplicate"); n != 1 {
		t.Fatalf("redelivery counted %d times as a duplicate", n)
	}
}

// TestHostBudget: a host's verified requests beyond its budget (5 a
// minute here) are answered 429 with Retry-After and nothing stored, until
// the budget refills; requests that fail verification spend nothing, so
// no one can spend another host's budget; a byte budget refuses the same
// way.
func TestHostBudget(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	b := setup(t, options{budget: 5, now: clock.now})
	b.remote.add("bob", key(t, keyRemote))
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	asBob := b.as(t, "bob")
	follow := func() []byte { return mustJSON(t, activity(b.id("follow"), "Follow", bob, alice.URI)) }

	// Forged requests naming bob's key: refused, and charged to no one.
	forged := signer{keyID: asBob.keyID, key: key(t, keyInstance)}
	for range 10 {
		if status, _ := do(t, b.request(t, "/inbox", follow(), forged)); status != http.StatusUnauthorized {
			t.Fatalf("forged: %d, want 401", status)
		}
	}
	for i := range 5 {
		if status, body := do(t, b.request(t, "/inbox", follow(), asBob)); status != http.StatusAccepted {
			t.Fatalf("request %d within the budget: %d %s", i+1, status, body)
		}
	}
	req := b.request(t, "/inbox", follow(), asBob)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "12" {
		t.Fatalf("over the budget: %d Retry-After %q, want 429 and 12 (5 a minute)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities`); n != 5 {
		t.Fatalf("%d activities stored, want the 5 within the budget", n)
	}
	if n := b.result(t, "throttled"); n != 1 {
		t.Fatalf("throttled counted %d times", n)
	}
	hosts := b.handler.HostBudgets()
	if len(hosts) != 1 || hosts[0].Throttled != 1 || hosts[0].Requests != 5 || hosts[0].RequestsPerMinute != 5 ||
		hosts[0].LastThrottledAt.IsZero() {
		t.Fatalf("host view %+v", hosts)
	}
	clock.advance(12 * time.Second)
	if status, body := do(t, b.request(t, "/inbox", follow(), asBob)); status != http.StatusAccepted {
		t.Fatalf("after the refill: %d %s", status, body)
	}

	// Bytes: a budget of 1 MiB a minute takes about ten notes of 100 KB.
	bb := setup(t, options{budget: 1000, budgetBytes: inbox.DefaultMaxBody, now: clock.now})
	bb.remote.add("bob", key(t, keyRemote))
	carol := bb.localActor(t, "carol", false)
	bobB := bb.remote.actor("bob")
	big := strings.Repeat("x", 100<<10)
	var throttled bool
	for i := range 12 {
		id := bb.id("create")
		a := activity(id, "Create", bobB, note(id+"/note", bobB, map[string]any{"content": big}))
		a["cc"] = []string{carol.URI}
		status, body := do(t, bb.request(t, "/inbox", mustJSON(t, a), bb.as(t, "bob")))
		if status == http.StatusTooManyRequests {
			throttled = i >= 9
			break
		}
		if status != http.StatusAccepted {
			t.Fatalf("note %d: %d %s", i+1, status, body)
		}
	}
	if !throttled {
		t.Fatal("a host over its byte budget was not throttled after about 1 MiB")
	}
}
