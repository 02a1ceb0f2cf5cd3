package server

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

const (
	remoteActor = "https://remote.test/users/bob"
	remoteNote  = "https://remote.test/notes/1"
)

// created checks a 201 answer to a client write end to end: Location is the
// activity id, the activity served there is the one answered, and the
// outbox holds its event, carrying the actor and those very bytes. It
// returns the parsed activity.
func (b *testBundle) created(t *testing.T, r response, typ string) *activitypub.Activity {
	t.Helper()
	wantStatus(t, r, http.StatusCreated)
	if ct := r.Header.Get("Content-Type"); ct != apJSON {
		t.Fatalf("content type %q", ct)
	}
	loc := r.Header.Get("Location")
	act, err := activitypub.ParseActivity(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if act.ID != loc || act.Type != typ || act.Actor != b.alice.URI || !strings.HasPrefix(loc, b.base+"/activities/") {
		t.Fatalf("Location %s, activity %s %s by %s", loc, act.ID, act.Type, act.Actor)
	}
	served := b.get(t, loc, "Authorization", "Bearer "+b.token)
	wantStatus(t, served, http.StatusOK)
	if !bytes.Equal(served.Body, r.Body) {
		t.Fatalf("served at Location:\n%s\nanswered:\n%s", served.Body, r.Body)
	}
	var evType, payload string
	err = b.db.Write.QueryRowContext(b.ctx, `SELECT e.type, e.payload FROM activities a
		JOIN event_queue_payloads e ON e.event_id = a.event_id WHERE a.uri = ?`, loc).Scan(&evType, &payload)
	if err != nil {
		t.Fatalf("outbox event of %s: %v", loc, err)
	}
	var out activitypub.Outgoing
	if err := json.Unmarshal([]byte(payload), &out); err != nil {
		t.Fatal(err)
	}
	if evType != activitypub.EventOutgoing || out.Actor != b.alice.URI || !bytes.Equal(out.Activity, r.Body) {
		t.Fatalf("event %s %s", evType, payload)
	}
	return act
}

func TestC2SCreateNote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	followers := b.base + "/users/alice/followers"
	r := b.post(t, "alice", b.token, map[string]any{
		"@context": activitypub.ActivityStreams,
		"id":       "https://evil.test/forged-id", // ignored: the server assigns ids
		"type":     "Create",
		"to":       []string{"as:Public"},
		"object": map[string]any{
			"id": "https://evil.test/forged-note", "type": "Note", "content": "<p>Hello, fediverse</p>",
			"cc": followers, "summary": "greeting", "sensitive": true,
		},
	})
	act := b.created(t, r, "Create")
	o := act.Object
	if o == nil || !strings.HasPrefix(o.ID, b.base+"/objects/") || o.AttributedTo[0] != b.alice.URI ||
		o.Content != "<p>Hello, fediverse</p>" || o.Summary != "greeting" || !o.Sensitive {
		t.Fatalf("note %+v", o)
	}
	if strings.Join(act.To, " ") != store.Public || strings.Join(act.Cc, " ") != followers ||
		strings.Join(o.To, " ") != store.Public || strings.Join(o.Cc, " ") != followers {
		t.Fatalf("addressing: activity %v %v, note %v %v", act.To, act.Cc, o.To, o.Cc)
	}
	stored, err := b.st.ObjectByURI(b.ctx, o.ID)
	if err != nil || stored.Content != o.Content || stored.Visibility != store.VisibilityPublic || stored.ActorID != b.alice.ID {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM objects WHERE uri LIKE 'https://evil.test/%'`); n != 0 {
		t.Fatal("client id used")
	}
}

func TestC2SBareNoteIsWrapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		to, cc     any
		visibility string
	}{
		{store.Public, b.base + "/users/alice/followers", store.VisibilityPublic},
		{b.base + "/users/alice/followers", "Public", store.VisibilityUnlisted},
		{[]string{b.base + "/users/alice/followers"}, nil, store.VisibilityFollowers},
		{[]string{remoteActor}, nil, store.VisibilityDirect},
	} {
		r := b.post(t, "alice", b.token, map[string]any{
			"type": "Note", "content": "wrapped " + tc.visibility, "to": tc.to, "cc": tc.cc, "attributedTo": b.alice.URI,
		})
		act := b.created(t, r, "Create")
		stored, err := b.st.ObjectByURI(b.ctx, act.ObjectID)
		if err != nil || stored.Visibility != tc.visibility || stored.Content != "wrapped "+tc.visibility {
			t.Fatalf("%s: stored %+v, %v", tc.visibility, stored, err)
		}
		public := tc.visibility == store.VisibilityPublic || tc.visibility == store.VisibilityUnlisted
		var isPublic bool
		_ = b.db.Write.QueryRow(`SELECT public FROM activities WHERE uri = ?`, act.ID).Scan(&isPublic)
		if isPublic != public {
			t.Fatalf("%s: public %v", tc.visibility, isPublic)
		}
	}
}

func (b *testBundle) note(t *testing.T, name, token, content string) string {
	t.Helper()
	r := b.post(t, name, token, map[string]any{"type": "Note", "content": content, "to": store.Public})
	wantStatus(t, r, http.StatusCreated)
	act, err := activitypub.ParseActivity(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return act.ObjectID
}

func TestC2SUpdateAndDeleteNote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.note(t, "alice", b.token, "first")
	b.clock.Advance(90_000_000_000) // 90 s
	r := b.post(t, "alice", b.token, map[string]any{
		"type": "Update", "object": map[string]any{"id": id, "type": "Note", "content": "second"},
	})
	act := b.created(t, r, "Update")
	if act.Object.Content != "second" || act.Object.ID != id || act.Object.Updated.IsZero() {
		t.Fatalf("Update object %+v", act.Object)
	}
	note := b.get(t, id)
	wantStatus(t, note, http.StatusOK)
	if m := note.json(t); m["content"] != "second" || m["updated"] != "2026-11-30T12:01:30Z" {
		t.Fatalf("served note %s", note.Body)
	}

	r = b.post(t, "alice", b.token, map[string]any{"type": "Delete", "object": id})
	act = b.created(t, r, "Delete")
	if act.Object == nil || act.Object.Type != "Tombstone" || act.ObjectID != id {
		t.Fatalf("Delete %s", r.Body)
	}
	gone := b.get(t, id)
	wantStatus(t, gone, http.StatusGone)
	m := gone.json(t)
	if m["type"] != "Tombstone" || m["formerType"] != "Note" || m["id"] != id || m["deleted"] != "2026-11-30T12:01:30Z" {
		t.Fatalf("tombstone %s", gone.Body)
	}
	page := b.do(t, http.MethodGet, id, nil, "Accept", "text/html")
	wantStatus(t, page, http.StatusGone)
	if !strings.Contains(string(page.Body), "This note was deleted.") || strings.Contains(string(page.Body), "second") {
		t.Fatalf("deleted page %s", page.Body)
	}
	stored, err := b.st.ObjectByURI(b.ctx, id)
	if err != nil || !stored.Deleted() || stored.Content != "" {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	// The Create of a deleted note is gone as well.
	var createURI string
	if err := b.db.Write.QueryRow(`SELECT uri FROM activities WHERE type = 'Create' AND object_uri = ?`, id).Scan(&createURI); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.get(t, createURI), http.StatusGone)
	// Deleting again: 410.
	wantStatus(t, b.post(t, "alice", b.token, map[string]any{"type": "Delete", "object": map[string]any{"id": id}}), http.StatusGone)
}

func TestC2SFollowLikeAnnounceBlockAndUndo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A cached remote note, so Like and Announce know its author.
	err := b.st.Tx(b.ctx, func(tx *sql.Tx) error {
		_, err := b.st.UpsertRemoteObjectTx(b.ctx, tx, store.RemoteObject{URI: remoteNote, AttributedTo: remoteActor,
			Content: "remote", To: []string{store.Public}, Document: json.RawMessage(`{"id":"` + remoteNote + `"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	follow := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Follow", "object": remoteActor}), "Follow")
	if follow.ObjectID != remoteActor || strings.Join(follow.To, "") != remoteActor {
		t.Fatalf("Follow %+v", follow)
	}
	if st, err := b.st.FollowingState(b.ctx, b.alice.ID, remoteActor); err != nil || st != store.StatePending {
		t.Fatalf("following %q, %v", st, err)
	}
	like := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Like", "object": remoteNote}), "Like")
	if strings.Join(like.To, "") != remoteActor {
		t.Fatalf("Like to %v", like.To)
	}
	announce := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Announce", "object": map[string]any{"id": remoteNote}}), "Announce")
	if strings.Join(announce.To, "") != store.Public {
		t.Fatalf("Announce to %v", announce.To)
	}
	if l, s, _ := b.st.ReactionCounts(b.ctx, remoteNote); l != 1 || s != 1 {
		t.Fatalf("reactions %d %d", l, s)
	}
	const blocked = "https://remote.test/users/troll"
	block := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Block", "object": blocked}), "Block")
	if ok, _ := b.st.Blocks(b.ctx, b.alice.ID, blocked); !ok || block.ObjectID != blocked {
		t.Fatal("block not stored")
	}

	// Undo each: by id string, by embedded activity, by type and object.
	u := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Undo", "object": follow.ID}), "Undo")
	if u.Object == nil || u.Object.ID != follow.ID || u.Object.Type != "Follow" {
		t.Fatalf("Undo Follow %s", u.Raw)
	}
	if _, err := b.st.FollowingState(b.ctx, b.alice.ID, remoteActor); err == nil {
		t.Fatal("still following after Undo")
	}
	u = b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Undo", "object": map[string]any{"id": like.ID, "type": "Like"}}), "Undo")
	if u.Object.ID != like.ID || strings.Join(u.To, "") != remoteActor {
		t.Fatalf("Undo Like %s", u.Raw)
	}
	u = b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Undo", "object": map[string]any{"type": "Announce", "object": remoteNote}}), "Undo")
	if u.Object.ID != announce.ID {
		t.Fatalf("Undo Announce %s", u.Raw)
	}
	if l, s, _ := b.st.ReactionCounts(b.ctx, remoteNote); l != 0 || s != 0 {
		t.Fatalf("reactions after undo %d %d", l, s)
	}
	u = b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Undo", "object": block.ID}), "Undo")
	if ok, _ := b.st.Blocks(b.ctx, b.alice.ID, blocked); ok || u.Object.Type != "Block" {
		t.Fatal("block survived Undo")
	}
	// Undone twice: conflict. The undone activities leave the owner's outbox view.
	wantStatus(t, b.post(t, "alice", b.token, map[string]any{"type": "Undo", "object": block.ID}), http.StatusConflict)
	own := b.get(t, "/users/alice/outbox?page=true", "Authorization", "Bearer "+b.token)
	if strings.Contains(string(own.Body), `"id":"`+follow.ID+`"`) {
		t.Fatal("undone Follow still in the outbox")
	}
	if n := b.count(t, `SELECT COUNT(*) FROM event_queue WHERE type = ?`, activitypub.EventOutgoing); n != 8 {
		t.Fatalf("%d outgoing events, want 8", n)
	}
}

func TestC2SUpdateProfile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post(t, "alice", b.token, map[string]any{
		"type": "Update", "object": map[string]any{"id": b.alice.URI, "type": "Person", "name": "Alice Liddell", "summary": "down the hole"},
	})
	act := b.created(t, r, "Update")
	person, err := activitypub.ParseActor(act.ObjectRaw)
	if err != nil || person.Name != "Alice Liddell" || person.Summary != "down the hole" {
		t.Fatalf("Update of actor %s: %v", act.ObjectRaw, err)
	}
	doc := b.get(t, "/users/alice").json(t)
	if doc["name"] != "Alice Liddell" {
		t.Fatalf("actor name %v", doc["name"])
	}
}

// failOn makes every insert into table abort, with a trigger in the
// store's dialect.
func (b *testBundle) failOn(t *testing.T, table string) {
	t.Helper()
	stmts := []string{`CREATE TRIGGER fail_` + table + ` BEFORE INSERT ON ` + table +
		` BEGIN SELECT RAISE(ABORT, 'forced failure'); END`}
	if b.db.Postgres() {
		stmts = []string{
			`CREATE FUNCTION fail_` + table + `() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN RAISE EXCEPTION 'forced failure'; END $$`,
			`CREATE TRIGGER fail_` + table + ` BEFORE INSERT ON ` + table +
				` FOR EACH ROW EXECUTE FUNCTION fail_` + table + `()`,
		}
	}
	for _, q := range stmts {
		if _, err := b.db.Write.ExecContext(b.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

func TestC2SRollsBackDataWhenEnqueueFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.failOn(t, "event_queue")
	for _, body := range []map[string]any{
		{"type": "Note", "content": "lost", "to": store.Public},
		{"type": "Follow", "object": remoteActor},
		{"type": "Block", "object": remoteActor},
	} {
		r := b.post(t, "alice", b.token, body)
		wantStatus(t, r, http.StatusInternalServerError)
		if m := r.json(t); m["error"] != "internal error" {
			t.Fatalf("body %s", r.Body)
		}
	}
	for _, table := range []string{"objects", "activities", "following", "blocks", "event_queue"} {
		if n := b.count(t, `SELECT COUNT(*) FROM `+table); n != 0 {
			t.Errorf("%s: %d rows after failed enqueues", table, n)
		}
	}
}

func TestC2SRollsBackEventWhenDataFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.failOn(t, "objects")
	b.failOn(t, "reactions")
	wantStatus(t, b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "x", "to": store.Public}), http.StatusInternalServerError)
	wantStatus(t, b.post(t, "alice", b.token, map[string]any{"type": "Like", "object": remoteNote}), http.StatusInternalServerError)
	for _, table := range []string{"activities", "event_queue"} {
		if n := b.count(t, `SELECT COUNT(*) FROM `+table); n != 0 {
			t.Errorf("%s: %d rows after failed writes", table, n)
		}
	}
}

func TestC2SBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, bobToken := b.actor(t, "bob")
	bobNote := b.note(t, "bob", bobToken, "bob's")
	bobFollow := b.post(t, "bob", bobToken, map[string]any{"type": "Follow", "object": remoteActor}).Header.Get("Location")
	aliceNote := b.note(t, "alice", b.token, "alice's")
	big := append([]byte(`{"type":"Note","to":"as:Public","content":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	big = append(big, `"}`...)

	for _, tc := range []struct {
		name    string
		path    string
		body    []byte
		headers []string
		status  int
	}{
		{"malformed JSON", "", []byte(`{"type": "Note",`), nil, 400},
		{"not an object", "", []byte(`["Note"]`), nil, 400},
		{"no type", "", []byte(`{"content": "x"}`), nil, 400},
		{"empty note", "", []byte(`{"type": "Note", "to": "as:Public"}`), nil, 400},
		{"no audience", "", []byte(`{"type": "Note", "content": "to whom?"}`), nil, 400},
		{"bad recipient", "", []byte(`{"type": "Note", "content": "x", "to": "javascript:alert(1)"}`), nil, 400},
		{"Follow without object", "", []byte(`{"type": "Follow"}`), nil, 400},
		{"unknown type", "", []byte(`{"type": "Dance", "object": "x"}`), nil, 422},
		{"unsupported type", "", []byte(`{"type": "Arrive", "object": "https://a.test/u"}`), nil, 422},
		{"Create of a Follow", "", []byte(`{"type": "Create", "object": {"type": "Follow", "object": "https://a.test/u"}}`), nil, 422},
		{"bcc", "", []byte(`{"type": "Note", "content": "x", "to": "as:Public", "bcc": ["https://a.test/u"]}`), nil, 422},
		{"bto in the object", "", []byte(`{"type": "Create", "object": {"type": "Note", "content": "x", "to": "as:Public", "bto": "https://a.test/u"}}`), nil, 422},
		{"Undo of a Create", "", []byte(`{"type": "Undo", "object": {"type": "Create", "object": "x"}}`), nil, 422},
		{"no token", "", []byte(`{"type": "Note"}`), []string{"Authorization", ""}, 401},
		{"wrong scheme", "", []byte(`{"type": "Note"}`), []string{"Authorization", "Basic " + b.token}, 401},
		{"wrong token", "", []byte(`{"type": "Note"}`), []string{"Authorization", "Bearer nope"}, 401},
		{"another actor's token", "", []byte(`{"type": "Note"}`), []string{"Authorization", "Bearer " + bobToken}, 403},
		{"as another actor", "", []byte(`{"type": "Follow", "actor": "` + b.base + `/users/bob", "object": "` + remoteActor + `"}`), nil, 403},
		{"attributed to another", "", []byte(`{"type": "Create", "object": {"type": "Note", "content": "x", "to": "as:Public", "attributedTo": "` + b.base + `/users/bob"}}`), nil, 403},
		{"update another's note", "", []byte(`{"type": "Update", "object": {"id": "` + bobNote + `", "type": "Note", "content": "mine now"}}`), nil, 403},
		{"delete another's note", "", []byte(`{"type": "Delete", "object": "` + bobNote + `"}`), nil, 403},
		{"delete a remote note", "", []byte(`{"type": "Delete", "object": "` + remoteNote + `"}`), nil, 403},
		{"undo another's follow", "", []byte(`{"type": "Undo", "object": "` + bobFollow + `"}`), nil, 403},
		{"update unknown note", "", []byte(`{"type": "Update", "object": {"id": "` + b.base + `/objects/00000000-0000-0000-0000-000000000000", "type": "Note", "content": "x"}}`), nil, 404},
		{"too large", "", big, nil, 413},
		{"wrong content type", "", []byte(`{"type": "Note"}`), []string{"Content-Type", "text/plain"}, 415},
		{"form content type", "", []byte(`type=Note`), []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"ld+json without profile", "", []byte(`{"type": "Note"}`), []string{"Content-Type", "application/ld+json"}, 415},
		{"unknown actor", "/users/nobody/outbox", []byte(`{"type": "Note"}`), nil, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/users/alice/outbox"
			}
			headers := append([]string{"Content-Type", apJSON, "Authorization", "Bearer " + b.token}, tc.headers...)
			r := b.do(t, http.MethodPost, path, tc.body, headers...)
			wantStatus(t, r, tc.status)
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("content type %q", ct)
			}
			var body struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil || body.Error == "" {
				t.Fatalf("error body %s", r.Body)
			}
			if tc.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatal("401 without WWW-Authenticate: Bearer")
			}
		})
	}
	// A too-large body sent chunked (no Content-Length) is refused as well.
	req, _ := http.NewRequest(http.MethodPost, b.base+"/users/alice/outbox", struct{ *bytes.Reader }{bytes.NewReader(big)})
	req.Header.Set("Content-Type", apJSON)
	req.Header.Set("Authorization", "Bearer "+b.token)
	res, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Fatalf("chunked large body: %d (content length %d)", res.StatusCode, req.ContentLength)
	}
	// Nothing of it was written: alice has her one note, bob his note and follow.
	if n := b.count(t, `SELECT COUNT(*) FROM activities`); n != 3 {
		t.Fatalf("%d activities after bad requests, want 3", n)
	}
	if m := b.get(t, aliceNote).json(t); m["content"] != "alice's" {
		t.Fatalf("alice's note changed: %v", m["content"])
	}
	if m := b.get(t, bobNote).json(t); m["content"] != "bob's" {
		t.Fatalf("bob's note changed: %v", m["content"])
	}
}

func TestC2SAcceptsPlainJSONAndLDJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", activitypub.LDContentType} {
		r := b.do(t, http.MethodPost, "/users/alice/outbox", []byte(`{"type":"Note","content":"x","to":"as:Public"}`),
			"Content-Type", ct, "Authorization", "Bearer "+b.token)
		wantStatus(t, r, http.StatusCreated)
	}
}

func FuzzDecodeC2S(f *testing.F) {
	for _, s := range []string{
		`{"type":"Note","content":"x","to":"as:Public"}`,
		`{"type":["Create"],"object":{"type":"Note","content":"x","to":["a"],"cc":{"id":"b"}}}`,
		`{"type":"Undo","object":{"type":"Like","object":{"id":"x"}}}`,
		`[]`, `null`, `{"type":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := decodeC2S(data)
		if err != nil {
			if store.ErrorCode(err) != store.EINVALID {
				t.Fatalf("decode error %v is not EINVALID", err)
			}
			return
		}
		// Every accessor tolerates whatever the client sent.
		_ = str(w.Type)
		if m, err := decodeDoc(data); err == nil {
			_, _ = clientContext(m["@context"], m)
			_ = checkQuote(m)
			_ = checkPoll("Question", m)
			if c, err := clientContext(m["@context"], nil); err == nil {
				typ, _ := m["type"].(string)
				_ = checkObjectLD("https://courier.test", c, typ, m) // no panic
			}
		}
		_ = objectID(w.Object)
		if _, err := embedded(w.Object); err != nil && store.ErrorCode(err) != store.EINVALID {
			t.Fatalf("embedded error %v", err)
		}
	})
}

// TestC2STooLargeBodyRead: a body over the limit is read (up to a bound)
// before the 413, so a client that sends it whole before reading the
// answer, as common clients do, gets the 413 rather than a reset
// connection; announced or not.
func TestC2STooLargeBodyRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.base)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 7<<20)
	for _, chunked := range []bool{false, true} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		head := "POST /users/alice/outbox HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer " + b.token +
			"\r\nContent-Type: application/activity+json\r\n"
		var req []byte
		if chunked {
			req = append([]byte(head+"Transfer-Encoding: chunked\r\n\r\n"), fmt.Sprintf("%x\r\n", len(body))...)
			req = append(append(req, body...), "\r\n0\r\n\r\n"...)
		} else {
			req = append([]byte(head+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))), body...)
		}
		if _, err := conn.Write(req); err != nil {
			t.Fatalf("chunked %v: writing the body: %v", chunked, err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("chunked %v: reading the answer: %v", chunked, err)
		}
		msg, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(msg, []byte("larger than")) {
			t.Fatalf("chunked %v: %d %s", chunked, res.StatusCode, msg)
		}
	}
}
