package chaos

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// signer is a stand-in for courier's side of a delivery: an actor whose
// document (with its real key) is served on loopback, and who signs POSTs.
type signer struct {
	id    string
	keyID string
	key   *rsa.PrivateKey
}

var (
	testKeyOnce sync.Once
	testKey     *rsa.PrivateKey
	testKeyErr  error
)

// sharedKey generates one RSA key for the whole test binary (key
// generation is the slow part).
func sharedKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	testKeyOnce.Do(func() { testKey, testKeyErr = activitypub.GenerateKey() })
	if testKeyErr != nil {
		t.Fatal(testKeyErr)
	}
	return testKey
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	key := sharedKey(t)
	pem, err := activitypub.EncodePublicKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	s := &signer{key: key}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, err := activitypub.MarshalActorDocument(&activitypub.Actor{
			ID: s.id, Type: "Person", Inbox: s.id + "/inbox",
			PublicKey: activitypub.PublicKey{ID: s.keyID, Owner: s.id, PublicKeyPem: pem},
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(srv.Close)
	s.id = srv.URL + "/users/alice"
	s.keyID = activitypub.KeyID(s.id)
	return s
}

// activity returns a Create of a note by s with the given id.
func (s *signer) activity(id string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "type": "Create", "actor": s.id,
		"object": map[string]any{"id": id + "/note", "type": "Note", "attributedTo": s.id, "content": "hi"},
	})
	return b
}

// post signs body and POSTs it to url; tamper changes the body after
// signing.
func (s *signer) post(t *testing.T, ctx context.Context, client *http.Client, url string, body []byte, tamper bool) (int, error) {
	t.Helper()
	sent := body
	if tamper {
		sent = bytes.Replace(body, []byte("hi"), []byte("ho"), 1)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(sent))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, s.keyID, s.key, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func newTestHost(t *testing.T, o hostOptions) *remoteHost {
	t.Helper()
	if o.name == "" {
		o.name = "h"
	}
	if o.rec == nil {
		o.rec = &recorder{}
	}
	if o.keys == nil {
		o.keys = newKeyring()
	}
	h, err := newRemoteHost(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

func TestRemoteHostVerifiesAndRecords(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	h := newTestHost(t, hostOptions{behaviour: Healthy, actors: 1, seed: 1})
	client := &http.Client{Timeout: 5 * time.Second}
	ctx := context.Background()

	status, err := s.post(t, ctx, client, h.sharedInbox(), s.activity(s.id+"/a/1"), false)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("signed POST to the shared inbox: %d, %v; want 202", status, err)
	}
	status, err = s.post(t, ctx, client, h.actors[0].inbox, s.activity(s.id+"/a/1"), false)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("signed POST to a personal inbox: %d, %v; want 202", status, err)
	}
	status, err = s.post(t, ctx, client, h.sharedInbox(), s.activity(s.id+"/a/2"), true)
	if err != nil || status != http.StatusUnauthorized {
		t.Fatalf("POST with a body that does not match its digest: %d, %v; want 401", status, err)
	}
	status, err = s.post(t, ctx, client, h.base+"/users/nobody/inbox", s.activity(s.id+"/a/3"), false)
	if err != nil || status != http.StatusNotFound {
		t.Fatalf("POST to an unknown actor's inbox: %d, %v; want 404", status, err)
	}

	posts := h.rec.snapshot()
	if len(posts) != 2 {
		t.Fatalf("recorded %d posts, want 2: %+v", len(posts), posts)
	}
	for _, p := range posts {
		if p.activityID != s.id+"/a/1" || p.typ != "Create" || p.objectID != s.id+"/a/1/note" || p.host != h.hostport {
			t.Errorf("recorded %+v", p)
		}
	}
	if n := h.rec.badSignatures.Load(); n != 1 {
		t.Errorf("bad signatures = %d, want 1", n)
	}
	if h.rec.lastActivity().IsZero() {
		t.Error("last activity not set")
	}
}

func TestRemoteHostServesActorDocuments(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, hostOptions{behaviour: Healthy, actors: 2, seed: 2})
	f, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 5 * time.Second}),
		Signer: activitypub.Signer{KeyID: "http://127.0.0.1:1/users/x#main-key", Key: sharedKey(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range h.actors {
		pub, actor, err := f.FetchKey(context.Background(), a.keyID)
		if err != nil {
			t.Fatalf("fetch key %s: %v", a.keyID, err)
		}
		if actor.ID != a.id || actor.InboxFor() != h.sharedInbox() {
			t.Errorf("actor %s: id %s, inbox %s", a.id, actor.ID, actor.InboxFor())
		}
		// The key fetched is the one the actor signs with.
		req := httptest.NewRequest(http.MethodPost, h.sharedInbox(), bytes.NewReader([]byte("{}")))
		if err := a.sign(req, []byte("{}"), time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := activitypub.Verify(req, []byte("{}"), pub, activitypub.VerifyOptions{}); err != nil {
			t.Errorf("a signature of %s does not verify with its published key: %v", a.id, err)
		}
	}
}

func TestRemoteHostFlapping(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	client := &http.Client{Timeout: 5 * time.Second}
	// Always refusing: nothing is recorded.
	down := newTestHost(t, hostOptions{behaviour: Flapping, actors: 1, seed: 3, failRate: 1})
	for i := range 3 {
		status, err := s.post(t, context.Background(), client, down.sharedInbox(), s.activity(s.id+"/f/"+string(rune('a'+i))), false)
		if err != nil || status != http.StatusServiceUnavailable {
			t.Fatalf("flapping host with fail rate 1: %d, %v; want 503", status, err)
		}
	}
	if n := len(down.rec.snapshot()); n != 0 || down.rec.refused.Load() != 3 {
		t.Errorf("recorded %d, refused %d; want 0 and 3", n, down.rec.refused.Load())
	}
	// Always failing after the work: recorded, yet answered 502.
	late := newTestHost(t, hostOptions{behaviour: Flapping, actors: 1, seed: 4, lateFail: 1})
	status, err := s.post(t, context.Background(), client, late.sharedInbox(), s.activity(s.id+"/l/1"), false)
	if err != nil || status != http.StatusBadGateway {
		t.Fatalf("late failure: %d, %v; want 502", status, err)
	}
	if n := len(late.rec.snapshot()); n != 1 {
		t.Errorf("late failure recorded %d posts, want 1", n)
	}
}

func TestRemoteHostSlow(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	h := newTestHost(t, hostOptions{behaviour: Slow, actors: 1, seed: 5, slowMin: 300 * time.Millisecond, slowMax: 400 * time.Millisecond})
	start := time.Now()
	status, err := s.post(t, context.Background(), &http.Client{Timeout: 5 * time.Second}, h.sharedInbox(), s.activity(s.id+"/s/1"), false)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("slow host: %d, %v", status, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("slow host answered after %s, want at least 300ms", d)
	}
	// A sender that gives up first leaves nothing recorded.
	_, err = s.post(t, context.Background(), &http.Client{Timeout: 100 * time.Millisecond}, h.sharedInbox(), s.activity(s.id+"/s/2"), false)
	if err == nil {
		t.Fatal("a 100ms client got an answer from a host that waits 300ms")
	}
	waitFor(t, 5*time.Second, "the abandoned POST's handler", func() bool { return h.rec.abandoned.Load() == 1 })
	if n := len(h.rec.snapshot()); n != 1 {
		t.Errorf("recorded %d posts, want 1 (the abandoned one must not count)", n)
	}
}

func TestRemoteHostBlackHole(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	h := newTestHost(t, hostOptions{behaviour: BlackHole, actors: 1, seed: 6})
	client := &http.Client{Timeout: 5 * time.Second}
	// Before it is switched on, the host answers (set-up needs that).
	status, err := s.post(t, context.Background(), client, h.sharedInbox(), s.activity(s.id+"/b/1"), false)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("black hole before switching on: %d, %v; want 202", status, err)
	}
	h.blackHole()
	short := &http.Client{Timeout: 300 * time.Millisecond}
	for _, url := range []string{h.sharedInbox(), h.actors[0].id} {
		var err error
		if url == h.actors[0].id {
			_, err = short.Get(url)
		} else {
			_, err = s.post(t, context.Background(), short, url, s.activity(s.id+"/b/2"), false)
		}
		var timeout interface{ Timeout() bool }
		if !errors.As(err, &timeout) || !timeout.Timeout() {
			t.Fatalf("black hole answered %s: %v; want a client timeout", url, err)
		}
	}
	if n := h.rec.hung.Load(); n != 2 {
		t.Errorf("hung = %d, want 2", n)
	}
	if n := len(h.rec.snapshot()); n != 1 {
		t.Errorf("recorded %d posts, want 1", n)
	}
}

func TestRemoteHostChaotic(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	// Failing every POST, but one activity at most twice.
	h := newTestHost(t, hostOptions{behaviour: Chaotic, actors: 1, seed: 7, failRate: 1, refuseMax: 2})
	short := &http.Client{Timeout: 300 * time.Millisecond}
	body := s.activity(s.id + "/c/1")
	for i := range 2 {
		status, err := s.post(t, context.Background(), short, h.sharedInbox(), body, false)
		if err == nil && status != http.StatusInternalServerError && status != http.StatusTooManyRequests {
			t.Fatalf("attempt %d at a host failing every POST: %d; want 500, 429 or no answer", i+1, status)
		}
	}
	status, err := s.post(t, context.Background(), short, h.sharedInbox(), body, false)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("third attempt of one activity: %d, %v; want 202 (failed twice already)", status, err)
	}
	var accepted int
	for _, p := range h.rec.snapshot() {
		if p.activityID == s.id+"/c/1" {
			accepted++
		}
	}
	if accepted < 1 || accepted > 2 {
		t.Errorf("the activity was recorded %d times, want 1 or 2 (a timeout after recording counts)", accepted)
	}

	// An outage hangs every request, recorded or not, until it ends.
	calm := newTestHost(t, hostOptions{behaviour: Chaotic, actors: 1, seed: 8})
	calm.hangFor(time.Now(), time.Hour)
	if _, err := s.post(t, context.Background(), short, calm.sharedInbox(), s.activity(s.id+"/c/2"), false); err == nil {
		t.Fatal("a host in an outage answered")
	}
	calm.hangFor(time.Now(), -time.Second)
	status, err = s.post(t, context.Background(), short, calm.sharedInbox(), s.activity(s.id+"/c/3"), false)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("after the outage: %d, %v; want 202", status, err)
	}
	if n := len(calm.rec.snapshot()); n != 1 {
		t.Errorf("recorded %d posts, want 1 (none during the outage)", n)
	}
}

func TestRemoteHostRecordsWhatConvergenceReads(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	h := newTestHost(t, hostOptions{behaviour: Healthy, actors: 1, seed: 9})
	client := &http.Client{Timeout: 5 * time.Second}
	update, _ := json.Marshal(map[string]any{
		"id": s.id + "/u/1", "type": "Update", "actor": s.id,
		"object": map[string]any{"id": s.id + "/note/1", "type": "Note", "content": convergeContent(4, 3)},
	})
	undo, _ := json.Marshal(map[string]any{
		"id": s.id + "/undo/1", "type": "Undo", "actor": s.id,
		"object": map[string]any{"id": s.id + "/like/1", "type": "Like", "actor": s.id, "object": "http://127.0.0.1:1/notes/n"},
	})
	for _, b := range [][]byte{update, undo} {
		if status, err := s.post(t, context.Background(), client, h.sharedInbox(), b, false); err != nil || status != http.StatusAccepted {
			t.Fatalf("POST: %d, %v", status, err)
		}
	}
	posts := h.rec.snapshot()
	if len(posts) != 2 {
		t.Fatalf("recorded %d posts, want 2", len(posts))
	}
	as := arrivalsOf(posts)
	if a := as[0]; a.typ != "Update" || a.actor != s.id || a.object != s.id+"/note/1" || a.version != 3 {
		t.Errorf("the Update arrived as %+v", a)
	}
	if a := as[1]; a.typ != "Undo" || a.object != s.id+"/like/1" || a.undoneType != "Like" || a.undoneObject != "http://127.0.0.1:1/notes/n" || a.version != -1 {
		t.Errorf("the Undo arrived as %+v", a)
	}
}
