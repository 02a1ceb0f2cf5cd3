package inbox_test

import (
	"database/sql"
	"net/http"
	"strings"
	"testing"

	"github.com/courier-ap/courier/store"
)

// TestTextNoStoreCanKeep: a body that is not valid UTF-8, or holds a NUL
// character, or a URL field with a control character, is refused 400 with
// a JSON message before anything is stored; SQLite would keep it and
// PostgreSQL refuse it (500, retried for ever), and a store copy from
// SQLite to PostgreSQL would stop on it.
func TestTextNoStoreCanKeep(t *testing.T) {
	b := setup(t)
	local := b.localActor(t, "ana", false)
	b.remote.add("bob", key(t, keyRemote))
	b.follow(t, local, b.remote.actor("bob"))
	bob := b.remote.actor("bob")
	create := func(noteID, inReplyTo, content string) string {
		return `{"@context":"https://www.w3.org/ns/activitystreams","id":"` + b.id("create") + `","type":"Create",` +
			`"actor":"` + bob + `","to":["` + local.URI + `"],"object":{"id":"` + noteID + `","type":"Note",` +
			`"attributedTo":"` + bob + `","to":["` + local.URI + `"],"inReplyTo":"` + inReplyTo + `","content":"` + content + `"}}`
	}
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"invalid UTF-8 in content", create(b.id("note"), "", "caf\xe9"), http.StatusBadRequest},
		{"NUL in content", create(b.id("note"), "", `a\u0000b`), http.StatusBadRequest},
		{"NUL in inReplyTo", create(b.id("note"), `https://x.example/n/1\u0000`, "hi"), http.StatusBadRequest},
		{"newline in the object id", create(b.id("note")+`\n`, "", "hi"), http.StatusBadRequest},
		{"C1 control in inReplyTo", create(b.id("note"), "https://x.example/\u0085", "hi"), http.StatusBadRequest},
		{"a backslash and u0000 as text", create(b.id("note"), "", `a\\u0000b`), http.StatusAccepted},
		{"UTF-8 and a tab in content", create(b.id("note"), "", `café\tà`), http.StatusAccepted},
	} {
		status, body := do(t, b.request(t, "/inbox", []byte(c.body), b.as(t, "bob")))
		if status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.status)
		}
		if status == http.StatusBadRequest && !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("%s: %s, want a JSON error", c.name, body)
		}
	}
	b.drain(t)
	if n := b.result(t, "bad_text"); n != 5 {
		t.Errorf("courier_inbox_requests_total{result=bad_text} = %d, want 5", n)
	}
}

// TestRemoteObjectTextRefused: the store itself refuses a remote object or
// actor whose document or URL fields no store can keep (EINVALID), so no
// import path can write what `courier store copy` would stop on.
func TestRemoteObjectTextRefused(t *testing.T) {
	b := setup(t)
	bob := b.remote.actor("bob")
	for _, c := range []struct {
		name string
		o    store.RemoteObject
	}{
		{"invalid UTF-8 document", store.RemoteObject{URI: bob + "/n/1", AttributedTo: bob,
			Document: []byte(`{"id":"` + bob + `/n/1","content":"caf` + "\xe9" + `"}`)}},
		{"NUL in inReplyTo", store.RemoteObject{URI: bob + "/n/2", AttributedTo: bob, InReplyTo: "https://x.example/\x00",
			Document: []byte(`{"id":"` + bob + `/n/2","inReplyTo":"https://x.example/\u0000"}`)}},
		{"NUL in the document", store.RemoteObject{URI: bob + "/n/3", AttributedTo: bob,
			Document: []byte(`{"id":"` + bob + `/n/3","content":"a\u0000"}`)}},
		{"control character in the id", store.RemoteObject{URI: bob + "/n/4\x01", AttributedTo: bob,
			Document: []byte(`{"id":"` + bob + `/n/4\u0001"}`)}},
	} {
		err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			_, err := b.st.UpsertRemoteObjectTx(b.ctx, tx, c.o)
			return err
		})
		if store.ErrorCode(err) != store.EINVALID {
			t.Errorf("%s: %v, want EINVALID", c.name, err)
		}
	}
	if n := b.count(t, `SELECT COUNT(*) FROM objects`); n != 0 {
		t.Errorf("%d objects stored", n)
	}
}
