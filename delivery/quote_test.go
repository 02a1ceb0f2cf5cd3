package delivery_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestQuoteRequestDelivered: a local quote of a remote post held here sends
// the quoted author a QuoteRequest with the quote inline, signed and
// verified by its server; the author's Accept (applied as the inbox's
// import applies it) makes the quote carry quoteAuthorization, and the
// Update is delivered to the quote's followers and to the quoted author.
func TestQuoteRequestDelivered(t *testing.T) {
	t.Parallel()
	r := newPublishRig(t)
	r.startWorker(4)
	author := r.other.actorURL("qa")
	quoted := r.other.URL() + "/statuses/1"
	doc, _ := json.Marshal(map[string]any{"id": quoted, "type": "Note", "attributedTo": author, "content": "original",
		"to": []string{activitypub.Public}})
	if err := r.db.Tx(r.ctx, func(tx *sql.Tx) error {
		_, err := r.st.UpsertRemoteObjectTx(r.ctx, tx, store.RemoteObject{URI: quoted, Type: "Note", AttributedTo: author,
			To: []string{activitypub.Public}, Published: time.Now(), Document: doc})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	status, create := r.post(t, map[string]any{"type": "Note", "content": "<p>see this</p>", "quote": quoted,
		"to": []any{activitypub.Public}, "cc": []any{baseURL + "/users/alice/followers"}})
	if status != http.StatusCreated {
		t.Fatalf("publish: %d %v", status, create)
	}
	quote := create["object"].(map[string]any)["id"].(string)
	var reqID string
	if err := r.db.Read.QueryRow(`SELECT request_uri FROM quote_requests`).Scan(&reqID); err != nil {
		t.Fatal(err)
	}
	req := r.delivered(t, r.other, reqID)
	inst, _ := req["instrument"].(map[string]any)
	if req["type"] != "QuoteRequest" || req["object"] != quoted || inst["id"] != quote || inst["quote"] != quoted {
		t.Fatalf("QuoteRequest delivered: %v", req)
	}

	stamp := r.other.URL() + "/quote_authorizations/1"
	var approved bool
	if err := r.db.Tx(r.ctx, func(tx *sql.Tx) error {
		var err error
		approved, _, err = r.st.AnswerQuoteRequestTx(r.ctx, tx, uuid.NewString(), reqID, author, "Accept", stamp)
		return err
	}); err != nil || !approved {
		t.Fatalf("Accept: %v %v", approved, err)
	}
	var updID string
	if err := r.db.Read.QueryRow(`SELECT uri FROM activities WHERE type = 'Update' AND object_uri = ?`, quote).Scan(&updID); err != nil {
		t.Fatal(err)
	}
	for _, rm := range []*remote{r.other, r.follower} {
		upd := r.delivered(t, rm, updID)
		if obj, _ := upd["object"].(map[string]any); obj["id"] != quote || obj["quoteAuthorization"] != stamp {
			t.Errorf("Update delivered to %s: %v", rm.URL(), upd["object"])
		}
	}
}

// TestLocalQuote: one local actor quotes another's note: the QuoteRequest,
// the Accept with its stamp and the Delete that revokes the stamp travel
// through the fan-out's local records and the inbox's import, as between
// servers; the quote gains quoteAuthorization and loses it again.
func TestLocalQuote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.withImporter()
	alice, bob := b.actor("alice"), b.actor("bob")
	b.startWorker(4)
	_, note, err := b.st.CreateObject(b.ctx, bob, store.ObjectInput{Type: "Note", Content: "quotable",
		Properties: map[string]any{"content": "quotable"}, To: []string{activitypub.Public}})
	if err != nil {
		t.Fatal(err)
	}
	_, quote, err := b.st.CreateObject(b.ctx, alice, store.ObjectInput{Type: "Note", Content: "see",
		Properties: map[string]any{"content": "see", "quote": note.URI}, To: []string{activitypub.Public},
		Quote: note.URI, QuotedAuthor: bob.URI})
	if err != nil {
		t.Fatal(err)
	}
	authorization := func() any {
		o, err := b.st.ObjectByURI(b.ctx, quote.URI)
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(o.Document, &d); err != nil {
			t.Fatal(err)
		}
		return d["quoteAuthorization"]
	}
	var stamp string
	waitFor(t, "the quote authorized", func() bool {
		stamp, _ = authorization().(string)
		return stamp != ""
	})
	if id, ok := b.st.URIs().QuoteID(stamp); !ok {
		t.Fatalf("quoteAuthorization %q is not a local stamp", stamp)
	} else if st, err := b.st.StampByLocalID(b.ctx, id); err != nil || st.QuoteURI != quote.URI || st.State != "accepted" {
		t.Fatalf("stamp %+v %v", st, err)
	}
	if _, err := b.st.RevokeQuote(b.ctx, bob, stamp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the authorization withdrawn", func() bool { return authorization() == nil })
}
