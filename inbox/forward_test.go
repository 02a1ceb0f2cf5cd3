package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// postLog is a remote host's inbox on loopback that checks the HTTP
// signature of every POST with one public key and keeps the bodies.
type postLog struct {
	srv *httptest.Server

	mu     sync.Mutex
	bodies map[string][][]byte // by path
	bad    int
	// refuse, when set, answers a POST 500 (not kept) when it returns true.
	refuse func(body []byte) bool
}

func newPostLog(t *testing.T, b *testBundle) *postLog {
	t.Helper()
	l := &postLog{bodies: map[string][][]byte{}}
	pub := &key(t, keyInstance).PublicKey // the local actors' key (localActor)
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil || r.Method != http.MethodPost || activitypub.Verify(r, body, pub, activitypub.VerifyOptions{}) != nil {
			l.bad++
			http.Error(w, "bad request or signature", http.StatusUnauthorized)
			return
		}
		if l.refuse != nil && l.refuse(body) {
			http.Error(w, "not now", http.StatusInternalServerError)
			return
		}
		l.bodies[r.URL.Path] = append(l.bodies[r.URL.Path], body)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// with returns the bodies POSTed to path that hold id.
func (l *postLog) with(path, id string) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for _, b := range l.bodies[path] {
		if bytes.Contains(b, []byte(`"`+id+`"`)) {
			out = append(out, b)
		}
	}
	return out
}

// runDelivery runs the db bus with the import handler and the delivery
// service until the test ends.
func (b *testBundle) runDelivery(t *testing.T) {
	t.Helper()
	svc, err := delivery.New(delivery.Config{DB: b.db, Store: b.st, Resolver: b.resolver, BaseURL: b.base, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := outbox.NewRegistry()
	b.importer.Register(reg)
	svc.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: b.db.Write, Read: b.db.Read, Registry: reg, Concurrency: 4, PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.db.OnWrite(w.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	runs.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	runs.Go(func() {
		if err := svc.Run(ctx); err != nil {
			t.Errorf("delivery: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); runs.Wait() })
}

// TestForwardPublicReply: bob of host B replies publicly to alice's note;
// alice's followers are carol and erin on host C (one shared inbox) and
// dan on host B. courier forwards the reply, signed as alice, to C's
// shared inbox exactly once with the bytes bob's server sent (whitespace
// and all), never to B; its receivers can verify it without bob's HTTP
// signature because it carries bob's FEP-8b32 proof (another reply carries
// an LD signature instead, and is forwarded too). The same reply without
// either is imported but not forwarded, and counted so.
func TestForwardPublicReply(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	b.runDelivery(t)
	b.remote.add("bob", key(t, keyRemote))
	ed := b.remote.addEd(t, "bob")
	b.remote.mu.Lock()
	b.remote.posts = map[string][][]byte{} // host B records what it is sent
	b.remote.mu.Unlock()
	hostC := newPostLog(t, b)
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")

	err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		for _, f := range []store.Follower{
			{URI: hostC.srv.URL + "/users/carol", Inbox: hostC.srv.URL + "/users/carol/inbox", SharedInbox: hostC.srv.URL + "/inbox"},
			{URI: hostC.srv.URL + "/users/erin", Inbox: hostC.srv.URL + "/users/erin/inbox", SharedInbox: hostC.srv.URL + "/inbox"},
			{URI: b.remote.actor("dan"), Inbox: b.remote.actor("dan") + "/inbox"},
		} {
			f.ActorID, f.State = alice.ID, store.StateAccepted
			if _, err := b.st.AddFollowerTx(b.ctx, tx, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "<p>what do you think?</p>",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers("alice")}})
	if err != nil {
		t.Fatal(err)
	}

	reply := func(id string, signed bool, extra ...map[string]any) []byte {
		n := map[string]any{"id": id + "/note", "type": "Note", "attributedTo": bob, "content": "<p>I agree</p>",
			"inReplyTo": note.URI, "to": []string{activitypub.Public}, "cc": []string{bob + "/followers", alice.URI},
			"published": "2026-12-06T13:00:00Z"}
		doc := map[string]any{"@context": activitypub.WithDataIntegrity(nil), "id": id, "type": "Create", "actor": bob,
			"object": n, "to": []string{activitypub.Public}, "cc": []string{bob + "/followers", alice.URI},
			"published": "2026-12-06T13:00:00Z"}
		for _, e := range extra {
			for k, v := range e {
				doc[k] = v
			}
		}
		raw := mustJSON(t, doc)
		if signed {
			var err error
			if raw, err = activitypub.AddProof(raw, activitypub.Ed25519KeyID(bob), ed, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		// As a peer may send it: indented, which a re-encoding would lose.
		var out bytes.Buffer
		if err := json.Indent(&out, raw, "", "  "); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}

	// Without a proof or an LD signature: imported, not forwarded.
	plainID := b.id("create")
	if status, resp := do(t, b.request(t, "/inbox", reply(plainID, false), b.as(t, "bob"))); status != http.StatusAccepted {
		t.Fatalf("the unproved reply: %d %s", status, resp)
	}
	// With bob's proof: forwarded.
	id := b.id("create")
	body := reply(id, true)
	for range 2 { // the second is a duplicate: nothing more happens
		if status, resp := do(t, b.request(t, "/inbox", body, b.as(t, "bob"))); status != http.StatusAccepted {
			t.Fatalf("the proved reply: %d %s", status, resp)
		}
	}
	// With an LD signature (Mastodon's), which courier passes on: forwarded.
	ldID := b.id("create")
	ldBody := reply(ldID, false, map[string]any{"signature": map[string]any{"type": "RsaSignature2017",
		"creator": b.remote.keyID("bob"), "created": "2026-12-06T13:00:00Z", "signatureValue": "c2lnbmVk"}})
	if status, resp := do(t, b.request(t, "/inbox", ldBody, b.as(t, "bob"))); status != http.StatusAccepted {
		t.Fatalf("the LD-signed reply: %d %s", status, resp)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(hostC.with("/inbox", id)) == 0 || len(hostC.with("/inbox", ldID)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no forward reached host C in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.drain(t)

	if got := b.outcome(t, plainID); got != inbox.OutcomeStored {
		t.Fatalf("the unproved reply's outcome %q", got)
	}
	got := hostC.with("/inbox", id)
	if len(got) != 1 {
		t.Fatalf("host C got the reply %d times, want once", len(got))
	}
	if !bytes.Equal(got[0], body) {
		t.Fatalf("the forward changed the bytes:\n%s\nwant\n%s", got[0], body)
	}
	hostC.mu.Lock()
	var paths []string
	for path := range hostC.bodies {
		paths = append(paths, path)
	}
	hostC.mu.Unlock()
	for _, path := range paths {
		if path != "/inbox" && len(hostC.with(path, id)) > 0 {
			t.Fatalf("the reply went to %s too", path)
		}
	}
	if got := hostC.with("/inbox", ldID); len(got) != 1 || !bytes.Equal(got[0], ldBody) {
		t.Fatalf("the LD-signed reply reached host C %d times, or changed", len(got))
	}
	if n := len(hostC.with("/inbox", plainID)); n != 0 {
		t.Fatalf("the unproved reply was forwarded %d times", n)
	}
	// Host B (bob's own) got alice's note, never the forward.
	b.remote.mu.Lock()
	var toB, noteToB int
	for _, bodies := range b.remote.posts {
		for _, p := range bodies {
			if bytes.Contains(p, []byte(id)) {
				toB++
			}
			if bytes.Contains(p, []byte(note.URI)) {
				noteToB++
			}
		}
	}
	b.remote.mu.Unlock()
	if toB != 0 || noteToB == 0 {
		t.Fatalf("host B got the forward %d times (alice's own note %d times)", toB, noteToB)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM delivery_targets WHERE activity_id = ?`, id); n != 1 {
		t.Fatalf("%d forwarded deliveries recorded, want 1", n)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventForward); n != 2 {
		t.Fatalf("%d forward events, want 2", n)
	}
	if f, u := b.forwards(t, "forwarded"), b.forwards(t, "unverifiable"); f != 2 || u != 1 {
		t.Fatalf("courier_inbox_forwards_total: forwarded %d, unverifiable %d; want 2 and 1", f, u)
	}
	if strings.Contains(string(got[0]), `"signature"`) {
		t.Fatal("the forward carries an LD signature it was not sent with")
	}
}

// forwards returns courier_inbox_forwards_total{result}.
func (b *testBundle) forwards(t testing.TB, result string) int {
	t.Helper()
	mfs, err := b.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "courier_inbox_forwards_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// TestForwardAddressedToFollowers: a reply addressed to alice's followers
// collection (not public) whose inReplyTo chain reaches alice's note
// through three remote replies held here is forwarded to her followers;
// one whose chain needs a fourth is past the recursion bound and is not.
func TestForwardAddressedToFollowers(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	b.runDelivery(t)
	b.remote.add("bob", key(t, keyRemote))
	ed := b.remote.addEd(t, "bob")
	hostC := newPostLog(t, b)
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	followers := b.st.URIs().Followers("alice")
	_, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "<p>root</p>", To: []string{activitypub.Public}})
	if err != nil {
		t.Fatal(err)
	}
	// A chain of remote replies held here: r1 replies to the note, r2 to
	// r1, and so on.
	chain := []string{note.URI}
	err = b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		if _, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: alice.ID, State: store.StateAccepted,
			URI: hostC.srv.URL + "/users/carol", Inbox: hostC.srv.URL + "/users/carol/inbox", SharedInbox: hostC.srv.URL + "/inbox"}); err != nil {
			return err
		}
		for i := 1; i <= 4; i++ {
			uri := b.remote.url("/notes/r" + string(rune('0'+i)))
			doc := mustJSON(t, map[string]any{"id": uri, "type": "Note", "attributedTo": bob, "content": "<p>r</p>",
				"inReplyTo": chain[i-1]})
			if _, err := b.st.UpsertRemoteObjectTx(b.ctx, tx, store.RemoteObject{URI: uri, Type: "Note", AttributedTo: bob,
				Content: "<p>r</p>", InReplyTo: chain[i-1], Published: time.Now(), Document: doc}); err != nil {
				return err
			}
			chain = append(chain, uri)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reply := func(id, inReplyTo string) []byte {
		n := map[string]any{"id": id + "/note", "type": "Note", "attributedTo": bob, "content": "<p>deep</p>",
			"inReplyTo": inReplyTo, "to": []string{bob + "/followers"}, "cc": []string{followers}}
		doc := map[string]any{"@context": activitypub.WithDataIntegrity(nil), "id": id, "type": "Create", "actor": bob,
			"object": n, "to": []string{bob + "/followers"}, "cc": []string{followers}}
		signed, err := activitypub.AddProof(mustJSON(t, doc), activitypub.Ed25519KeyID(bob), ed, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	tooDeep, within := b.id("create"), b.id("create")
	for _, c := range []struct{ id, parent string }{{tooDeep, chain[4]}, {within, chain[3]}} {
		if status, resp := do(t, b.request(t, "/inbox", reply(c.id, c.parent), b.as(t, "bob"))); status != http.StatusAccepted {
			t.Fatalf("reply to %s: %d %s", c.parent, status, resp)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(hostC.with("/inbox", within)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reply within the bound was not forwarded in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.drain(t)
	if got := b.outcome(t, tooDeep); got != inbox.OutcomeStored {
		t.Fatalf("the deep reply's outcome %q", got)
	}
	if n := len(hostC.with("/inbox", tooDeep)); n != 0 {
		t.Fatalf("the reply past the recursion bound was forwarded %d times", n)
	}
	if n := len(hostC.with("/inbox", within)); n != 1 {
		t.Fatalf("the reply within the bound was forwarded %d times", n)
	}
}

// TestForwardDeleteFollowsItsCreate: the Delete of a forwarded reply is
// forwarded too, where the reply went, and after it. A reply forwarded to
// host C and then deleted reaches C as Create, then Delete. A second
// reply whose forward C refuses once (500) is deleted before the retry:
// the Create is superseded (never sent again) and C gets the Delete alone,
// so no forwarded copy outlives its author's Delete.
func TestForwardDeleteFollowsItsCreate(t *testing.T) {
	t.Parallel()
	b := setup(t, options{noWorker: true})
	b.runDelivery(t)
	b.remote.add("bob", key(t, keyRemote))
	ed := b.remote.addEd(t, "bob")
	hostC := newPostLog(t, b)
	alice := b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	if err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.AddFollowerTx(b.ctx, tx, store.Follower{ActorID: alice.ID, State: store.StateAccepted,
			URI: hostC.srv.URL + "/users/carol", Inbox: hostC.srv.URL + "/users/carol/inbox", SharedInbox: hostC.srv.URL + "/inbox"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "<p>what do you think?</p>",
		To: []string{activitypub.Public}, CC: []string{b.st.URIs().Followers("alice")}})
	if err != nil {
		t.Fatal(err)
	}
	proved := func(doc map[string]any) []byte {
		raw, err := activitypub.AddProof(mustJSON(t, doc), activitypub.Ed25519KeyID(bob), ed, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	post := func(body []byte) {
		t.Helper()
		if status, resp := do(t, b.request(t, "/inbox", body, b.as(t, "bob"))); status != http.StatusAccepted {
			t.Fatalf("POST: %d %s", status, resp)
		}
	}
	create := func(id string) []byte {
		return proved(map[string]any{"@context": activitypub.WithDataIntegrity(nil), "id": id, "type": "Create", "actor": bob,
			"object": map[string]any{"id": id + "/note", "type": "Note", "attributedTo": bob, "content": "<p>I agree</p>",
				"inReplyTo": note.URI, "to": []string{activitypub.Public}, "cc": []string{alice.URI}},
			"to": []string{activitypub.Public}, "cc": []string{alice.URI}})
	}
	del := func(id, object string) []byte {
		return proved(map[string]any{"@context": activitypub.WithDataIntegrity(nil), "id": id, "type": "Delete", "actor": bob,
			"object": map[string]any{"id": object, "type": "Tombstone"}, "to": []string{activitypub.Public}})
	}
	arrived := func(ids ...string) []string { // the types host C kept, in order
		hostC.mu.Lock()
		defer hostC.mu.Unlock()
		var out []string
		for _, body := range hostC.bodies["/inbox"] {
			var a struct{ ID, Type string }
			_ = json.Unmarshal(body, &a)
			for _, id := range ids {
				if a.ID == id {
					out = append(out, a.Type)
				}
			}
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	first := b.id("create")
	post(create(first))
	waitFor("the reply forwarded", func() bool { return len(arrived(first)) == 1 })
	firstDel := b.id("delete")
	post(del(firstDel, first+"/note"))
	waitFor("its Delete forwarded", func() bool { return len(arrived(first, firstDel)) == 2 })
	if got := arrived(first, firstDel); strings.Join(got, " ") != "Create Delete" {
		t.Fatalf("host C kept %v, want the Create, then the Delete", got)
	}

	second := b.id("create")
	var refused int
	hostC.mu.Lock()
	hostC.refuse = func(body []byte) bool {
		if bytes.Contains(body, []byte(`"`+second+`"`)) && refused == 0 {
			refused++
			return true
		}
		return false
	}
	hostC.mu.Unlock()
	post(create(second))
	waitFor("the second reply's forward refused once", func() bool { hostC.mu.Lock(); defer hostC.mu.Unlock(); return refused == 1 })
	secondDel := b.id("delete")
	post(del(secondDel, second+"/note"))
	waitFor("the second Delete forwarded", func() bool { return len(arrived(secondDel)) == 1 })
	waitFor("the refused Create settled", func() bool {
		var status string
		_ = b.db.Read.QueryRowContext(b.ctx, `SELECT q.status FROM delivery_targets d JOIN event_queue q ON q.event_id = d.event_id
			WHERE d.activity_id = ?`, second).Scan(&status)
		return status == string(outbox.StatusDone)
	})
	if got := arrived(second, secondDel); strings.Join(got, " ") != "Delete" {
		t.Fatalf("host C kept %v of the deleted reply, want its Delete only", got)
	}
}
