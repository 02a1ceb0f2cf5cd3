package delivery_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

func TestFanoutToFollowersOnSeveralHosts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	a := newRemote(t, b.keys, b.clock, true)  // shared inbox
	c := newRemote(t, b.keys, b.clock, true)  // shared inbox
	p := newRemote(t, b.keys, b.clock, false) // personal inboxes only
	for _, n := range []string{"a1", "a2", "a3"} {
		a.follow(b, alice, n)
	}
	for _, n := range []string{"c1", "c2"} {
		c.follow(b, alice, n)
	}
	for _, n := range []string{"p1", "p2"} {
		p.follow(b, alice, n)
	}
	// A follower on a blocked domain is never a target.
	b.follower(alice, "https://blocked.example/users/x", "https://blocked.example/users/x/inbox", "")
	if err := b.st.AddDomainBlock(b.ctx, "blocked.example", "spam"); err != nil {
		t.Fatal(err)
	}
	act, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "<p>hello & welcome</p>",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers("alice")}})
	if err != nil {
		t.Fatal(err)
	}
	b.startWorker(8)
	b.waitTicking("delivery rows done", func() bool {
		rows := b.deliveryRows()
		for _, r := range rows {
			if r.Status != outbox.StatusDone {
				return false
			}
		}
		return len(rows) == 4
	})

	stored, err := b.st.ActivityByURI(b.ctx, act.URI)
	if err != nil {
		t.Fatal(err)
	}
	wantPaths := map[*remote][]string{a: {"/inbox"}, c: {"/inbox"}, p: {"/users/p1/inbox", "/users/p2/inbox"}}
	for rm, paths := range wantPaths {
		got := rm.received()
		var gotPaths []string
		for _, r := range got {
			gotPaths = append(gotPaths, r.Path)
			if !bytes.Equal(r.Body, stored.Document) {
				t.Errorf("%s got body %s, want the stored activity %s", rm.URL(), r.Body, stored.Document)
			}
			if r.ActivityID != act.URI || r.KeyID != alice.URI+"#main-key" {
				t.Errorf("%s got activity %s signed by %s", rm.URL(), r.ActivityID, r.KeyID)
			}
			if r.UserAgent != "courier/1.2.3 (+"+baseURL+")" {
				t.Errorf("User-Agent %q", r.UserAgent)
			}
		}
		sort.Strings(gotPaths)
		if strings.Join(gotPaths, " ") != strings.Join(paths, " ") {
			t.Errorf("%s got POSTs to %v, want %v", rm.URL(), gotPaths, paths)
		}
	}
	// Delivery events: one per inbox, ids derived from the parent and the
	// inbox, Target the inbox's host.
	parent := act.EventID
	for inbox, r := range b.deliveryRows() {
		if r.Event.ID != outbox.ChildID(parent, inbox) {
			t.Errorf("delivery %s has id %s, want ChildID(parent, inbox)", inbox, r.Event.ID)
		}
		if !strings.Contains(inbox, r.Event.Target) {
			t.Errorf("delivery %s has target %q", inbox, r.Event.Target)
		}
	}
	// The admin view: every inbox delivered (attempt records are written
	// in batches, a moment after the delivery).
	var sts []delivery.InboxStatus
	waitFor(t, "attempt records", func() bool {
		if sts, err = b.svc.Status(b.ctx, act.URI, delivery.StatusQuery{}); err != nil {
			t.Fatal(err)
		}
		for _, st := range sts {
			if st.LastOutcome == "" {
				return false
			}
		}
		return true
	})
	if len(sts) != 4 {
		t.Fatalf("status lists %d inboxes, want 4", len(sts))
	}
	for _, st := range sts {
		if st.State != delivery.StateDelivered || st.LastStatus != 202 {
			t.Errorf("status of %s: %+v", st.Inbox, st)
		}
	}
}

// TestDeterministicActivities builds every kind of outgoing activity
// through the store, runs each fan-out three times (twice, then again after
// a restart of the service), and checks that ids and bytes never change, no
// extra delivery appears, and a receiver sees each activity exactly once.
func TestDeterministicActivities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	rm.follow(b, alice, "fan")
	bob, carol, dave := rm.actorURL("bob"), rm.actorURL("carol"), rm.actorURL("dave")
	// A remote note by bob, so a Like is addressed to him.
	note := rm.URL() + "/notes/1"
	err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		doc, _ := json.Marshal(map[string]any{"id": note, "type": "Note", "attributedTo": bob, "content": "hi",
			"to": []string{activitypub.Public}})
		_, err := b.st.UpsertRemoteObjectTx(b.ctx, tx, store.RemoteObject{URI: note, Type: "Note", AttributedTo: bob,
			Content: "hi", To: []string{activitypub.Public}, Published: b.clock.Now(), Document: doc})
		if err != nil {
			return err
		}
		for _, f := range []string{carol, dave} {
			if _, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: alice.ID, URI: f,
				Inbox: f + "/inbox", State: store.StatePending, FollowActivityID: f + "/follows/1"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	must := func(a *store.Activity, err error) *store.Activity {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	var acts []*store.Activity
	create, obj, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "one",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers("alice")}})
	if err != nil {
		t.Fatal(err)
	}
	update, _, err := notetest.Update(b.ctx, b.st, alice, obj.URI, notetest.Input{Content: "one, edited"})
	if err != nil {
		t.Fatal(err)
	}
	follow := must(b.st.Follow(b.ctx, alice, bob))
	like := must(b.st.Like(b.ctx, alice, note))
	announce := must(b.st.Announce(b.ctx, alice, note))
	block := must(b.st.Block(b.ctx, alice, rm.actorURL("eve")))
	acts = append(acts, create, update, must(b.st.DeleteObject(b.ctx, alice, obj.URI)), follow, like, announce, block,
		must(b.st.Undo(b.ctx, alice, follow.URI)), must(b.st.Undo(b.ctx, alice, like.URI)),
		must(b.st.Undo(b.ctx, alice, announce.URI)), must(b.st.Undo(b.ctx, alice, block.URI)),
		must(b.st.ApproveFollower(b.ctx, alice, carol)), must(b.st.RejectFollower(b.ctx, alice, dave)))
	name := "Alice"
	_, profile, err := b.st.UpdateActor(b.ctx, "alice", store.ActorUpdate{DisplayName: &name})
	if err != nil {
		t.Fatal(err)
	}
	acts = append(acts, profile)
	rotated, rotation, err := b.st.UpdateActor(b.ctx, "alice", store.ActorUpdate{RotateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	b.trustKey(rotated)
	acts = append(acts, rotation)

	children := func() map[string]string { // event id -> payload
		m := map[string]string{}
		for _, r := range b.rows(delivery.EventPost) {
			m[r.Event.ID] = string(r.Event.Payload)
		}
		return m
	}
	for round := range 3 {
		if round == 2 {
			b.restart()
		}
		before := children()
		for _, a := range acts {
			if err := b.handle(b.eventOf(a)); err != nil {
				t.Fatalf("round %d: fan-out of %s %s: %v", round, a.Type, a.URI, err)
			}
		}
		after := children()
		if round > 0 && len(after) != len(before) {
			t.Fatalf("round %d: fan-out re-run created %d deliveries, had %d", round, len(after), len(before))
		}
		for id, p := range before {
			if after[id] != p {
				t.Fatalf("round %d: delivery %s changed", round, id)
			}
		}
	}
	for _, a := range acts {
		ev := b.eventOf(a)
		var out activitypub.Outgoing
		if err := json.Unmarshal(ev.Payload, &out); err != nil {
			t.Fatal(err)
		}
		parsed, err := activitypub.ParseActivity(out.Activity)
		if err != nil {
			t.Fatal(err)
		}
		if want := activitypub.ActivityID(baseURL, ev.ID, parsed.Type); parsed.ID != want || a.URI != want {
			t.Errorf("%s id %s, want %s", parsed.Type, parsed.ID, want)
		}
		if !parsed.Published.Equal(ev.OccurredAt.UTC().Truncate(time.Second)) {
			t.Errorf("%s published %s, event at %s", parsed.Type, parsed.Published, ev.OccurredAt)
		}
		stored, err := b.st.ActivityByURI(b.ctx, a.URI)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stored.Document, out.Activity) {
			t.Errorf("%s: stored %s, event carries %s", a.Type, stored.Document, out.Activity)
		}
	}
	b.startWorker(4)
	// Every activity goes to the follower's inbox (Create, Update, Delete,
	// Announce, the profile Updates) or a named remote actor (Follow, Like,
	// Block, their Undos, Accept, Reject); the Undo of Announce follows the
	// Announce's audience.
	b.waitTicking("every delivery settled", func() bool {
		rows := b.rows(delivery.EventPost)
		for _, r := range rows {
			if r.Status != outbox.StatusDone && r.Status != outbox.StatusDeadLettered {
				return false
			}
		}
		return len(rows) > 0
	})
	perInbox := map[string]int{}
	types := map[string]bool{}
	for _, r := range rm.received() {
		perInbox[r.Path+" "+r.ActivityID]++
		types[r.Type] = true
	}
	for k, n := range perInbox {
		if n != 1 {
			t.Errorf("%s received %d times", k, n)
		}
	}
	for _, typ := range []string{"Update", "Delete", "Follow", "Like", "Announce", "Block", "Undo", "Accept", "Reject"} {
		if !types[typ] {
			t.Errorf("no %s was delivered", typ)
		}
	}
	// The note was deleted before its Create and Update went: they are
	// superseded, not sent (order.go); everything else is delivered.
	superseded := 0
	for _, r := range b.rows(delivery.EventPost) {
		var p delivery.Post
		if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
			t.Fatal(err)
		}
		ok, err := b.svc.Superseded(b.ctx, r.Event.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (p.ActivityID == create.URI || p.ActivityID == update.URI) {
			t.Errorf("delivery of %s to %s: superseded %v", p.ActivityID, p.Inbox, ok)
		}
		if ok {
			superseded++
		}
	}
	if types["Create"] || superseded == 0 {
		t.Errorf("the deleted note's Create was sent (%d superseded)", superseded)
	}
	if got, want := len(perInbox), len(b.rows(delivery.EventPost))-superseded; got != want {
		t.Errorf("receiver saw %d distinct (inbox, activity) pairs, %d deliveries were enqueued and not superseded", got, want)
	}
	for _, r := range b.rows(delivery.EventPost) {
		if r.Status != outbox.StatusDone {
			t.Errorf("delivery %s: %s %s", r.Event.ID, r.Status, r.LastError)
		}
	}
}

func TestFanoutRejectsForeignActivityID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	body, _, err := activitypub.NewActivity(baseURL, "7e0bdb2c-54a4-4c55-9d7c-2c2a1f7a0e10", "Create", alice.URI,
		map[string]any{"id": baseURL + "/objects/x", "type": "Note"}, []string{activitypub.Public}, nil, b.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(activitypub.Outgoing{Actor: alice.URI, Activity: body})
	// The event id differs from the one the activity's id was derived from.
	ev := outbox.Event{ID: "0a5e7a2b-0f5c-4a47-a3c1-5c9d2f7b1e22", Type: activitypub.EventOutgoing, Payload: payload}
	err = b.handle(ev)
	var perm *outbox.PermanentError
	if !errors.As(err, &perm) || !errors.Is(err, delivery.ErrNotDeterministic) {
		t.Fatalf("fan-out of a foreign id: %v, want a permanent ErrNotDeterministic", err)
	}
}

// inboxesOf runs the fan-out of ev and returns the inboxes of the deliveries
// it enqueued, in order.
func (b *bundle) inboxesOf(ev outbox.Event) []string {
	b.t.Helper()
	before := len(b.rows(delivery.EventPost))
	if err := b.handle(ev); err != nil {
		b.t.Fatalf("fan-out: %v", err)
	}
	var out []string
	for _, r := range b.rows(delivery.EventPost)[before:] {
		var p delivery.Post
		if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, p.Inbox)
	}
	return out
}

func TestNamedRecipients(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	rm.mu.Lock()
	rm.getStatus["gone"] = http.StatusGone
	rm.getStatus["missing"] = http.StatusNotFound
	rm.getStatus["flaky"] = http.StatusServiceUnavailable
	rm.mu.Unlock()
	direct := func(to ...string) outbox.Event {
		t.Helper()
		act, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "psst", To: to})
		if err != nil {
			t.Fatal(err)
		}
		return b.eventOf(act)
	}
	// Named actors are fetched with a signed GET, cached, and reached
	// through their host's shared inbox; a 410 or 404 actor is skipped; a
	// local actor is never POSTed; a blocked actor is never a target.
	if _, _, err := b.st.CreateActor(b.ctx, store.NewActor{Name: "local"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Block(b.ctx, alice, rm.actorURL("blocked")); err != nil {
		t.Fatal(err)
	}
	ev := direct(rm.actorURL("bob"), rm.actorURL("carol"), rm.actorURL("gone"), rm.actorURL("missing"),
		rm.actorURL("blocked"), b.st.URIs().Actor("local"))
	inboxes := b.inboxesOf(ev)
	// The Block of "blocked" went to its shared inbox too, before.
	if strings.Join(inboxes, " ") != rm.URL()+"/inbox" {
		t.Errorf("direct note goes to %v, want the shared inbox once", inboxes)
	}
	rm.mu.Lock()
	gets := rm.gets
	rm.mu.Unlock()
	if err := b.handle(ev); err != nil {
		t.Fatal(err)
	}
	rm.mu.Lock()
	if rm.gets != gets+2 { // gone and missing are fetched again; bob and carol come from the cache
		t.Errorf("re-run fetched %d actors, want 2 (the cached ones are not refetched)", rm.gets-gets)
	}
	rm.mu.Unlock()
	// Past the cache's TTL, actors are fetched again.
	b.clock.Advance(25 * time.Hour)
	if err := b.handle(ev); err != nil {
		t.Fatal(err)
	}
	rm.mu.Lock()
	if rm.gets < gets+6 {
		t.Errorf("after the TTL %d fetches, want bob and carol refetched", rm.gets-gets)
	}
	rm.mu.Unlock()

	// An actor that cannot be fetched for now fails the fan-out, which is
	// retried (not dropped).
	err := b.handle(direct(rm.actorURL("bob"), rm.actorURL("flaky")))
	var perm *outbox.PermanentError
	if err == nil || errors.As(err, &perm) {
		t.Fatalf("fan-out with an unreachable recipient: %v, want a retryable error", err)
	}
}

// A Like, an Announce and their Undo of a remote note courier has not stored
// reach the note's author, found by fetching the note; a note that is gone
// is skipped, and a note that cannot be fetched right now fails the fan-out,
// which retries.
func TestReactionsToUnstoredObjectsReachTheAuthor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, false)
	rm.mu.Lock()
	rm.getStatus["note:gone"] = http.StatusGone
	rm.getStatus["note:flaky"] = http.StatusServiceUnavailable
	rm.mu.Unlock()
	like, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/bob")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.inboxesOf(b.eventOf(like)); strings.Join(got, " ") != rm.actorURL("bob")+"/inbox" {
		t.Errorf("Like goes to %v, want bob's inbox", got)
	}
	undo, err := b.st.Undo(b.ctx, alice, like.URI)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.inboxesOf(b.eventOf(undo)); strings.Join(got, " ") != rm.actorURL("bob")+"/inbox" {
		t.Errorf("Undo of the Like goes to %v, want bob's inbox", got)
	}
	boost, err := b.st.Announce(b.ctx, alice, rm.URL()+"/notes/carol")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.inboxesOf(b.eventOf(boost)); !slices.Contains(got, rm.actorURL("carol")+"/inbox") {
		t.Errorf("Announce goes to %v, want carol's inbox among them", got)
	}
	gone, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/gone")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.inboxesOf(b.eventOf(gone)); len(got) != 0 {
		t.Errorf("Like of a gone note goes to %v, want nowhere", got)
	}
	flaky, err := b.st.Like(b.ctx, alice, rm.URL()+"/notes/flaky")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.handle(b.eventOf(flaky)); err == nil || errors.As(err, new(*outbox.PermanentError)) {
		t.Errorf("fan-out of a Like whose note answers 503: %v, want a retryable error", err)
	}
}

// A recipient whose host name does not exist (NXDOMAIN; .invalid never
// resolves) shows under its host in the host list from the first failed
// fan-out, before any delivery to it exists; the fan-out is retried for
// NameNotFoundAttempts-1 attempts, then the recipient is given up: an
// activity with other recipients goes to them, one with none (a Follow of
// that actor) fails for good instead of being retried to the last attempt.
func TestRecipientOnUnknownHost(t *testing.T) {
	t.Parallel()
	const host = "courier-nowhere.invalid"
	if _, err := net.DefaultResolver.LookupHost(t.Context(), host); !errors.As(err, new(*net.DNSError)) || !err.(*net.DNSError).IsNotFound {
		t.Skipf("this machine's resolver does not answer NXDOMAIN for %s: %v", host, err)
	}
	b := setup(t)
	alice := b.actor("alice")
	rm := newRemote(t, b.keys, b.clock, true)
	nowhere := "https://" + host + "/users/zoe"
	handleAt := func(ev outbox.Event, attempt int) error {
		t.Helper()
		var errs []error
		for _, h := range b.reg.Handlers(ev.Type) {
			errs = append(errs, h.Handler(outbox.WithAttempt(b.ctx, attempt), ev))
		}
		return errors.Join(errs...)
	}
	direct := func(to ...string) outbox.Event {
		t.Helper()
		act, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "psst", To: to})
		if err != nil {
			t.Fatal(err)
		}
		return b.eventOf(act)
	}
	only, both := direct(nowhere), direct(rm.actorURL("bob"), nowhere)
	var perm *outbox.PermanentError
	for attempt := 1; attempt < delivery.NameNotFoundAttempts; attempt++ {
		for _, ev := range []outbox.Event{only, both} {
			if err := handleAt(ev, attempt); err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "no such host") {
				t.Fatalf("attempt %d: %v; want a retryable error naming the unknown host", attempt, err)
			}
		}
		hs, err := b.svc.Health().Host(b.ctx, host)
		if err != nil || hs.State == delivery.HostHealthy || hs.ConsecutiveFailures != 2*attempt || !strings.Contains(hs.LastError, "unknown host: "+host) {
			t.Fatalf("attempt %d: the host's health %+v, %v; want %d failures, unknown host", attempt, hs, err, 2*attempt)
		}
	}
	listed, err := b.svc.Health().Hosts(b.ctx, delivery.HostQuery{})
	if err != nil || !slices.ContainsFunc(listed, func(h delivery.HostStatus) bool { return h.Host == host }) {
		t.Fatalf("the host list %+v, %v; want %s in it", listed, err, host)
	}
	last := delivery.NameNotFoundAttempts
	if err := handleAt(only, last); !errors.As(err, &perm) || !strings.Contains(err.Error(), "no such host") {
		t.Fatalf("attempt %d with no other recipient: %v; want a permanent failure", last, err)
	}
	before := len(b.rows(delivery.EventPost))
	if err := handleAt(both, last); err != nil {
		t.Fatalf("attempt %d with another recipient: %v", last, err)
	}
	var got []string
	for _, r := range b.rows(delivery.EventPost)[before:] {
		var p delivery.Post
		if err := json.Unmarshal(r.Event.Payload, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Inbox)
	}
	if strings.Join(got, " ") != rm.URL()+"/inbox" {
		t.Errorf("the note goes to %v, want bob's shared inbox only", got)
	}
}
