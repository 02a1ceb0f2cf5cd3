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
