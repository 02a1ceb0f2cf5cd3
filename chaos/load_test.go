package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// TestSenderRetriesUntilAcceptedAndResends: an inbox that fails twice gets
// the activity a third time, freshly signed and verifiable each time, and
// then once more as a deliberate duplicate.
func TestSenderRetriesUntilAcceptedAndResends(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, hostOptions{behaviour: Healthy, actors: 1, seed: 7})
	from := h.actors[0]
	pub, err := activitypub.ParsePublicKeyPEM(mustPEM(t, from))
	if err != nil {
		t.Fatal(err)
	}
	var calls, verified atomic.Int64
	inbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if activitypub.Verify(r, body, pub, activitypub.VerifyOptions{}) == nil {
			verified.Add(1)
		}
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(inbox.Close)

	s := newSender(1, slog.New(slog.DiscardHandler))
	la := &localActor{name: "local0", id: inbox.URL + "/users/local0", inbox: inbox.URL + "/users/local0/inbox"}
	a := newCreate(from, la, inbox.URL+"/inbox", false, 1, time.Now())
	s.add(a, 1) // always resent once after the ack
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.dispatch(ctx)
	}()
	waitFor(t, 20*time.Second, "ack and resend", func() bool {
		items, dups := s.snapshot()
		return items[0].acked && dups == 1
	})
	cancel()
	<-done
	items, _ := s.snapshot()
	if items[0].sends != 4 || calls.Load() != 4 || verified.Load() != 4 {
		t.Errorf("sends %d, calls %d, verified %d; want 4 each", items[0].sends, calls.Load(), verified.Load())
	}
	if s.pending() != 0 {
		t.Errorf("pending = %d after the ack", s.pending())
	}
}

// TestSenderStopsOnRefusal: a 4xx is final, as peers treat it.
func TestSenderStopsOnRefusal(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, hostOptions{behaviour: Healthy, actors: 1, seed: 8})
	var calls atomic.Int64
	inbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(inbox.Close)
	s := newSender(2, slog.New(slog.DiscardHandler))
	la := &localActor{id: inbox.URL + "/users/l", inbox: inbox.URL + "/users/l/inbox"}
	s.add(newFollow(h.actors[0], la), 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.dispatch(ctx)
	}()
	waitFor(t, 10*time.Second, "refusal", func() bool {
		items, _ := s.snapshot()
		return items[0].refused == http.StatusUnauthorized
	})
	cancel()
	<-done
	if due := s.due(time.Now().Add(time.Hour), 10); len(due) != 0 {
		t.Errorf("a refused activity is due again: %d", len(due))
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("a refused activity was sent %d times, want 1", n)
	}
}

// TestWriterCountsOutcomes posts notes to a stand-in outbox that answers
// 201, 500 and 400 in turn.
func TestWriterCountsOutcomes(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != activitypub.ContentType {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in["type"] != "Note" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch i := n.Add(1); i % 3 {
		case 1:
			w.Header().Set("Content-Type", activitypub.ContentType)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"http://x/activities/%d","type":"Create","actor":"http://x/users/a","object":{"id":"http://x/objects/%d","type":"Note"}}`, i, i)
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	a := &localActor{name: "a", id: srv.URL + "/users/a", token: "tok"}
	w := newWriter(srv.URL, []*localActor{a}, 1, slog.New(slog.DiscardHandler))
	for i := 1; i <= 6; i++ {
		w.mu.Lock()
		w.seq++
		w.mu.Unlock()
		w.write(context.Background(), a, i)
	}
	st := w.stats()
	if st.Attempted != 6 || st.Acked != 2 || st.Failed != 2 || st.Rejected != 2 {
		t.Errorf("stats %+v; want 6 attempted, 2 acked, 2 failed, 2 rejected", st)
	}
	if _, ok := st.AckedIDs["http://x/activities/4"]; !ok {
		t.Errorf("acked ids %v", st.AckedIDs)
	}
	if nt, ok := w.randomNote(w.rng); !ok || nt.author != a {
		t.Errorf("randomNote = %+v, %t", nt, ok)
	}
}

func mustPEM(t *testing.T, a *remoteActor) string {
	t.Helper()
	pem, err := activitypub.EncodePublicKeyPEM(&a.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem
}
