package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
)

// Quote consent (FEP-044f) end to end: QuoteRequests in the shape Mastodon
// 4.5 sends (testdata/mastodon-4.5-shape, hand-written from its
// serializers), signed and posted to the inbox; the answers courier
// enqueues; the stamps the public listener serves; the author's approval
// and revocation by client-to-server writes.

// quoteRig is the bundle with the public listener (package server) beside
// it, over the same store.
type quoteRig struct {
	*bundle
	pub *httptest.Server
}

func newQuoteRig(t *testing.T) *quoteRig {
	t.Helper()
	b := setup(t, app.Config{})
	// Signed GETs are read (a followers-only item for a server one of whose
	// actors follows its author), with keys fetched from the remote.
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second}),
		Signer: activitypub.Signer{KeyID: b.base + "/actor#main-key", Key: testKey(t)}})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	// Pages of two items, so that the collections' cursors are walked.
	s, err := server.New(server.Config{Store: b.st, Keys: keys, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	pub := httptest.NewServer(s.Handler())
	t.Cleanup(pub.Close)
	return &quoteRig{bundle: b, pub: pub}
}

// shape reads testdata/mastodon-4.5-shape/name with the remote host and
// the placeholders replaced.
func (r *quoteRig) shape(t *testing.T, name string, repl map[string]string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("testdata/mastodon-4.5-shape/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(raw), "https://remote.example", r.remote.URL)
	for k, v := range repl {
		s = strings.ReplaceAll(s, "{{"+k+"}}", v)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// c2s posts body to actor name's outbox with token tok and returns the
// status and the answer.
func (r *quoteRig) c2s(t *testing.T, name, tok string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, r.pub.URL+"/users/"+name+"/outbox", bytes.NewReader(b))
	req.Header.Set("Content-Type", activitypub.ContentType)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(rb, &m)
	return resp.StatusCode, m
}

// fetch GETs the local document id (unsigned) from the public listener.
func (r *quoteRig) fetch(t *testing.T, id string) (int, map[string]any) {
	t.Helper()
	return r.fetchAs(t, id, "")
}

// fetchAs GETs the local document id signed by the remote actor signer
// ("": unsigned).
func (r *quoteRig) fetchAs(t *testing.T, id, signer string) (int, map[string]any) {
	t.Helper()
	path := strings.TrimPrefix(id, r.base)
	req, _ := http.NewRequest(http.MethodGet, r.pub.URL+path, nil)
	req.Header.Set("Accept", activitypub.ContentType)
	if signer != "" {
		if err := activitypub.SignRequest(req, nil, signer+"#main-key", testKey(t), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// note publishes a public note of actor name by client-to-server, with
// extra properties, and returns its id.
func (r *quoteRig) note(t *testing.T, name, tok string, extra map[string]any) string {
	t.Helper()
	obj := map[string]any{"type": "Note", "content": "quotable", "to": []string{activitypub.Public}}
	for k, v := range extra {
		obj[k] = v
	}
	status, act := r.c2s(t, name, tok, obj)
	if status != http.StatusCreated {
		t.Fatalf("publish: %d %v", status, act)
	}
	return act["object"].(map[string]any)["id"].(string)
}

// outcome waits for the import outcome of the activity id.
func (r *quoteRig) outcome(t *testing.T, id string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var o *string
		err := r.db.Read.QueryRow(`SELECT outcome FROM inbox_activities WHERE activity_id = ?`, id).Scan(&o)
		if err == nil && o != nil {
			return *o
		}
		if time.Now().After(deadline) {
			t.Fatalf("activity %s not imported", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sent returns the documents of the activities of type typ actor a built,
// oldest first.
func (r *quoteRig) sent(t *testing.T, a *store.Actor, typ string) []map[string]any {
	t.Helper()
	rows, err := r.db.Read.Query(`SELECT document FROM activities WHERE actor_id = ? AND type = ? ORDER BY id`, a.ID, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// kinds returns the kinds of actor a's inbox view items, oldest first.
func (r *quoteRig) kinds(t *testing.T, a *store.Actor) []string {
	t.Helper()
	rows, err := r.db.Read.Query(`SELECT kind FROM app_inbox_items WHERE actor_id = ? ORDER BY seq`, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

func canQuoteOf(t *testing.T, doc map[string]any) (auto, manual []any) {
	t.Helper()
	p, _ := doc["interactionPolicy"].(map[string]any)
	cq, _ := p["canQuote"].(map[string]any)
	if cq == nil {
		t.Fatalf("no interactionPolicy.canQuote in %v", doc)
	}
	auto, _ = cq["automaticApproval"].([]any)
	manual, _ = cq["manualApproval"].([]any)
	return auto, manual
}

// checkStamp fetches the stamp and checks it authorizes quote of quoted by
// author.
func (r *quoteRig) checkStamp(t *testing.T, stamp, author, quote, quoted string) {
	t.Helper()
	status, doc := r.fetch(t, stamp)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %v", stamp, status, doc)
	}
	for k, want := range map[string]string{"id": stamp, "type": "QuoteAuthorization", "attributedTo": author,
		"interactingObject": quote, "interactionTarget": quoted} {
		if doc[k] != want {
			t.Errorf("stamp %s = %v, want %s", k, doc[k], want)
		}
	}
}

// TestQuoteRequestAutomaticAndRevoked: a public note under the default
// policy (public, automatic) carries it; a QuoteRequest in Mastodon 4.5's
// shape is answered with an Accept whose result is a stamp the public
// listener serves to anyone; the author's Delete of the stamp revokes it
// (410) and sends the quoter a Delete of it.
func TestQuoteRequestAutomaticAndRevoked(t *testing.T) {
	t.Parallel()
	r := newQuoteRig(t)
	alice, tok := r.actor(t, "alice", false)
	quoted := r.note(t, "alice", tok, nil)
	_, doc := r.fetch(t, quoted)
	if auto, _ := canQuoteOf(t, doc); !slices.Equal(auto, []any{activitypub.Public}) {
		t.Fatalf("default canQuote.automaticApproval %v", auto)
	}
	if !strings.Contains(string(mustMarshal(t, doc["@context"])), `"canQuote":{"@id":"gts:canQuote","@type":"@id"}`) {
		t.Errorf("@context defines no canQuote: %v", doc["@context"])
	}

	req := r.shape(t, "quote-request.json", map[string]string{"QUOTED": quoted})
	r.post(t, req)
	if got := r.outcome(t, req["id"].(string)); got != store.QuoteAccepted {
		t.Fatalf("outcome %q", got)
	}
	accepts := r.sent(t, alice, "Accept")
	if len(accepts) != 1 {
		t.Fatalf("%d Accepts", len(accepts))
	}
	acc := accepts[0]
	obj, _ := acc["object"].(map[string]any)
	quote := req["instrument"].(map[string]any)["id"].(string)
	if obj["id"] != req["id"] || obj["type"] != "QuoteRequest" || obj["instrument"] != quote {
		t.Errorf("Accept object %v", obj)
	}
	bob := r.remoteActor("bob")
	if to, _ := acc["to"].([]any); len(to) != 1 || to[0] != bob {
		t.Errorf("Accept to %v", acc["to"])
	}
	stamp, _ := acc["result"].(string)
	if !strings.HasPrefix(stamp, r.base+"/quotes/") {
		t.Fatalf("Accept result %v", acc["result"])
	}
	r.checkStamp(t, stamp, alice.URI, quote, quoted)
	r.waitItems(t, alice, 1)
	if k := r.kinds(t, alice); !slices.Equal(k, []string{app.KindQuote}) {
		t.Errorf("inbox kinds %v", k)
	}

	if status, body := r.c2s(t, "alice", tok, map[string]any{"type": "Delete", "object": stamp}); status != http.StatusCreated {
		t.Fatalf("revoke: %d %v", status, body)
	}
	if status, _ := r.fetch(t, stamp); status != http.StatusGone {
		t.Errorf("revoked stamp: %d", status)
	}
	dels := r.sent(t, alice, "Delete")
	if len(dels) != 1 || dels[0]["object"] != stamp {
		t.Fatalf("Deletes %v", dels)
	}
	if to, _ := dels[0]["to"].([]any); len(to) != 1 || to[0] != bob {
		t.Errorf("Delete to %v", dels[0]["to"])
	}
}

// TestQuoteRequestNobody: an actor whose default policy is nobody (set by
// an Update of itself) publishes notes that say so (its own id alone), and
// a QuoteRequest of one is rejected without a stamp or a notification.
func TestQuoteRequestNobody(t *testing.T) {
	t.Parallel()
	r := newQuoteRig(t)
	alice, tok := r.actor(t, "alice", false)
	status, body := r.c2s(t, "alice", tok, map[string]any{"type": "Update", "object": map[string]any{
		"id": alice.URI, "interactionPolicy": map[string]any{"canQuote": map[string]any{"automaticApproval": []any{}}}}})
	if status != http.StatusCreated {
		t.Fatalf("set the policy: %d %v", status, body)
	}
	quoted := r.note(t, "alice", tok, nil)
	_, doc := r.fetch(t, quoted)
	if auto, manual := canQuoteOf(t, doc); !slices.Equal(auto, []any{alice.URI}) || manual != nil {
		t.Fatalf("nobody's canQuote %v %v", auto, manual)
	}
	req := r.shape(t, "quote-request.json", map[string]string{"QUOTED": quoted})
	r.post(t, req)
	if got := r.outcome(t, req["id"].(string)); got != store.QuoteRejected {
		t.Fatalf("outcome %q", got)
	}
	rejects := r.sent(t, alice, "Reject")
	if len(rejects) != 1 || rejects[0]["object"].(map[string]any)["id"] != req["id"] || rejects[0]["result"] != nil {
		t.Fatalf("Rejects %v", rejects)
	}
	if n := len(r.sent(t, alice, "Accept")); n != 0 {
		t.Errorf("%d Accepts", n)
	}
	var n int
	if err := r.db.Read.QueryRow(`SELECT COUNT(*) FROM quote_stamps`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d stamps (%v)", n, err)
	}
	if k := r.kinds(t, alice); len(k) != 0 {
		t.Errorf("inbox kinds %v", k)
	}
}

// TestQuoteRequestManual: a note whose own policy asks for manual approval
// keeps the request pending, notifies its author (quote_request) and
// answers nothing until the author's Accept by client-to-server, which
// sends the Accept with a stamp; deleting the note then revokes the stamp
// and tells the quoter.
func TestQuoteRequestManual(t *testing.T) {
	t.Parallel()
	r := newQuoteRig(t)
	alice, tok := r.actor(t, "alice", false)
	quoted := r.note(t, "alice", tok, map[string]any{"interactionPolicy": map[string]any{
		"canQuote": map[string]any{"manualApproval": []any{"as:Public"}}}})
	_, doc := r.fetch(t, quoted)
	if auto, manual := canQuoteOf(t, doc); !slices.Equal(manual, []any{activitypub.Public}) || len(auto) != 0 {
		t.Fatalf("manual canQuote %v %v", auto, manual)
	}
	req := r.shape(t, "quote-request.json", map[string]string{"QUOTED": quoted})
	r.post(t, req)
	if got := r.outcome(t, req["id"].(string)); got != store.QuotePending {
		t.Fatalf("outcome %q", got)
	}
	r.waitItems(t, alice, 1)
	if k := r.kinds(t, alice); !slices.Equal(k, []string{app.KindQuoteRequest}) {
		t.Errorf("inbox kinds %v", k)
	}
	if n := len(r.sent(t, alice, "Accept")) + len(r.sent(t, alice, "Reject")); n != 0 {
		t.Fatalf("%d answers before the approval", n)
	}
	status, body := r.c2s(t, "alice", tok, map[string]any{"type": "Accept", "object": req["id"]})
	if status != http.StatusCreated {
		t.Fatalf("approve: %d %v", status, body)
	}
	stamp, _ := body["result"].(string)
	quote := req["instrument"].(map[string]any)["id"].(string)
	r.checkStamp(t, stamp, alice.URI, quote, quoted)
	if status, body := r.c2s(t, "alice", tok, map[string]any{"type": "Accept", "object": req["id"]}); status != http.StatusConflict {
		t.Errorf("second approval: %d %v", status, body)
	}

	if status, body := r.c2s(t, "alice", tok, map[string]any{"type": "Delete", "object": quoted}); status != http.StatusCreated {
		t.Fatalf("delete the note: %d %v", status, body)
	}
	if status, _ := r.fetch(t, stamp); status != http.StatusGone {
		t.Errorf("stamp of a deleted note: %d", status)
	}
	var revoked []map[string]any
	for _, d := range r.sent(t, alice, "Delete") {
		if d["object"] == stamp {
			revoked = append(revoked, d)
		}
	}
	if len(revoked) != 1 {
		t.Fatalf("%d Deletes of the stamp", len(revoked))
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQuoteOutbound: a local quote of a remote post sends its author a
// QuoteRequest with the quote inline; the author's Accept (Mastodon 4.5's
// shape) sets the quote's quoteAuthorization and enqueues its Update, and
// notifies the quoter; an edit keeps it; a Reject of another quote's request notifies the
// quoter and leaves that quote as published; the author's Delete of the
// stamp takes quoteAuthorization off the quote again (an Update).
func TestQuoteOutbound(t *testing.T) {
	t.Parallel()
	r := newQuoteRig(t)
	alice, tok := r.actor(t, "alice", false)
	bob := r.remoteActor("bob")
	r.follows(t, alice, bob)
	var quoted [2]string
	for i := range quoted {
		quoted[i] = r.remote.URL + "/users/bob/statuses/" + []string{"2", "3"}[i]
		create := map[string]any{"@context": activitypub.ActivityStreams, "id": r.id("create"), "type": "Create", "actor": bob,
			"to": []string{activitypub.Public}, "object": map[string]any{"id": quoted[i], "type": "Note", "attributedTo": bob,
				"content": "original", "to": []string{activitypub.Public}}}
		r.post(t, create)
		if got := r.outcome(t, create["id"].(string)); got != "stored" {
			t.Fatalf("Create outcome %q", got)
		}
	}
	var quotes [2]string
	for i := range quotes {
		quotes[i] = r.note(t, "alice", tok, map[string]any{"quote": quoted[i]})
	}
	reqs := r.sent(t, alice, "QuoteRequest")
	if len(reqs) != 2 {
		t.Fatalf("%d QuoteRequests", len(reqs))
	}
	for i, q := range reqs {
		inst, _ := q["instrument"].(map[string]any)
		if q["object"] != quoted[i] || inst["id"] != quotes[i] || inst["quote"] != quoted[i] {
			t.Errorf("QuoteRequest %d: object %v instrument %v", i, q["object"], inst["id"])
		}
		if to, _ := q["to"].([]any); len(to) != 1 || to[0] != bob {
			t.Errorf("QuoteRequest %d to %v", i, q["to"])
		}
	}

	accept := r.shape(t, "accept-quote-request.json", map[string]string{
		"REQUEST": reqs[0]["id"].(string), "QUOTER": alice.URI, "QUOTE": quotes[0]})
	r.post(t, accept)
	if got := r.outcome(t, accept["id"].(string)); got != "quote_approved" {
		t.Fatalf("Accept outcome %q", got)
	}
	stamp := accept["result"].(string)
	updates := r.sent(t, alice, "Update")
	if len(updates) != 1 {
		t.Fatalf("%d Updates", len(updates))
	}
	if obj := updates[0]["object"].(map[string]any); obj["id"] != quotes[0] || obj["quoteAuthorization"] != stamp {
		t.Errorf("Update object %v", obj)
	}
	if _, doc := r.fetch(t, quotes[0]); doc["quoteAuthorization"] != stamp {
		t.Errorf("served quote's quoteAuthorization %v", doc["quoteAuthorization"])
	}

	reject := map[string]any{"@context": activitypub.ActivityStreams, "id": r.id("reject"), "type": "Reject", "actor": bob,
		"object": map[string]any{"id": reqs[1]["id"], "type": "QuoteRequest", "actor": alice.URI, "object": quoted[1],
			"instrument": quotes[1]}}
	r.post(t, reject)
	if got := r.outcome(t, reject["id"].(string)); got != "quote_denied" {
		t.Fatalf("Reject outcome %q", got)
	}
	if _, doc := r.fetch(t, quotes[1]); doc["quoteAuthorization"] != nil || doc["quote"] != quoted[1] {
		t.Errorf("rejected quote: quote %v quoteAuthorization %v", doc["quote"], doc["quoteAuthorization"])
	}
	// An edit that keeps the quote keeps its authorization; one the client
	// sends itself is not taken.
	status, body := r.c2s(t, "alice", tok, map[string]any{"type": "Update", "object": map[string]any{"id": quotes[0],
		"content": "edited", "quote": quoted[0], "quoteAuthorization": "https://forged.example/stamp"}})
	if status != http.StatusCreated {
		t.Fatalf("edit: %d %v", status, body)
	}
	if _, doc := r.fetch(t, quotes[0]); doc["quoteAuthorization"] != stamp || doc["content"] != "edited" {
		t.Errorf("edited quote: content %v quoteAuthorization %v", doc["content"], doc["quoteAuthorization"])
	}

	// The quoted author revokes the stamp: the quote loses it again.
	revoke := map[string]any{"@context": activitypub.ActivityStreams, "id": r.id("delete"), "type": "Delete", "actor": bob,
		"to": []string{alice.URI}, "object": stamp}
	r.post(t, revoke)
	if got := r.outcome(t, revoke["id"].(string)); got != "quote_revoked" {
		t.Fatalf("Delete of the stamp: outcome %q", got)
	}
	if _, doc := r.fetch(t, quotes[0]); doc["quoteAuthorization"] != nil {
		t.Errorf("revoked quote's quoteAuthorization %v", doc["quoteAuthorization"])
	}
	if updates := r.sent(t, alice, "Update"); len(updates) != 3 || updates[2]["object"].(map[string]any)["quoteAuthorization"] != nil {
		t.Errorf("Updates after the revocation: %v", updates)
	}
	kinds := r.kinds(t, alice)
	for _, want := range []string{app.KindQuoteApproved, app.KindQuoteRejected, app.KindQuoteRevoked} {
		if !slices.Contains(kinds, want) {
			t.Errorf("inbox kinds %v lack %s", kinds, want)
		}
	}
}

// TestInboundQuoteVerified: a remote quote of a local note notifies its
// author as approved (quote) only with a valid stamp: one courier granted
// for that very quote. A stamp granted for another quote, a fetched
// document that is no QuoteAuthorization, a fetched QuoteAuthorization in
// Mastodon's shape by another actor than the quoted author, and no stamp
// at all leave it unapproved (quote_unapproved).
func TestInboundQuoteVerified(t *testing.T) {
	t.Parallel()
	r := newQuoteRig(t)
	alice, tok := r.actor(t, "alice", false)
	quoted := r.note(t, "alice", tok, nil)
	req := r.shape(t, "quote-request.json", map[string]string{"QUOTED": quoted})
	r.post(t, req)
	if got := r.outcome(t, req["id"].(string)); got != store.QuoteAccepted {
		t.Fatalf("outcome %q", got)
	}
	stamp := r.sent(t, alice, "Accept")[0]["result"].(string)
	bob := r.remoteActor("bob")
	create := func(id, auth string) {
		obj := r.shape(t, "quote-request.json", map[string]string{"QUOTED": quoted})["instrument"].(map[string]any)
		obj["id"] = id
		if auth != "" {
			obj["quoteAuthorization"] = auth
		}
		c := map[string]any{"@context": activitypub.ActivityStreams, "id": id + "/activity", "type": "Create", "actor": bob,
			"to": obj["to"], "cc": obj["cc"], "object": obj}
		r.post(t, c)
		if got := r.outcome(t, id+"/activity"); got != "stored" {
			t.Fatalf("Create %s outcome %q", id, got)
		}
	}
	create(req["instrument"].(map[string]any)["id"].(string), stamp)       // the quote the stamp names
	create(r.remote.URL+"/users/bob/statuses/other", stamp)                // another quote with that stamp
	create(r.remote.URL+"/users/bob/statuses/fetched", bob+"/not-a-stamp") // a remote document, not a stamp
	// A stamp in Mastodon's shape, fetched, naming the quote and the quoted
	// object, but attributed to someone else than the quoted author.
	forged := r.remote.URL + "/users/bob/statuses/forged"
	stampDoc := r.shape(t, "quote-authorization.json", map[string]string{"QUOTED": quoted, "QUOTE": forged})
	r.docs.Store("/users/bob/quote_authorizations/7", mustMarshal(t, stampDoc))
	create(forged, stampDoc["id"].(string))
	create(r.remote.URL+"/users/bob/statuses/bare", "") // no stamp
	want := []string{app.KindQuote, app.KindQuote, app.KindQuoteUnapproved, app.KindQuoteUnapproved,
		app.KindQuoteUnapproved, app.KindQuoteUnapproved}
	r.waitItems(t, alice, len(want))
	if got := r.kinds(t, alice); !slices.Equal(got, want) {
		t.Errorf("inbox kinds %v, want %v", got, want)
	}
}
