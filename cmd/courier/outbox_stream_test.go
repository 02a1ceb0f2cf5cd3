package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestOutboxStreamWired: in a serving process, alice's outbox names its
// eventStream, and what she posts through the client-to-server outbox
// arrives on it as an Add of the very activity the POST created; the
// ops listener's metrics show the open stream and the event sent.
func TestOutboxStreamWired(t *testing.T) {
	t.Parallel()
	a, _ := startApp(t, func(c *Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if dl, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-5*time.Second))
	}
	defer cancel()
	_, token, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, a.cfg.BaseURL+"/users/alice/outbox", nil)
	req.Header.Set("Accept", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ EventStream string }
	err = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if err != nil || c.EventStream != a.cfg.BaseURL+"/users/alice/outbox/stream" {
		t.Fatalf("the outbox's eventStream: %q (%v)", c.EventStream, err)
	}

	type event struct{ id, data string }
	events := make(chan event, 1)
	done := make(chan error, 1)
	go func() {
		done <- readStream(ctx, c.EventStream, token, "0", 1, func(id, data string) error {
			events <- event{id, data}
			return nil
		})
	}()
	st, created := c2s(t, a, "alice", token, map[string]any{"type": "Note", "content": "on the stream",
		"to": []string{activitypub.Public}})
	if st != http.StatusCreated {
		t.Fatalf("POST to the outbox: %d %v", st, created)
	}
	var ev event
	select {
	case ev = <-events:
	case err := <-done:
		// The reader ends once it has its one event: both may be ready.
		select {
		case ev = <-events:
			done <- err // read again below
		default:
			t.Fatalf("the stream ended without an event: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no event by the deadline")
	}
	var data struct {
		Type   string `json:"type"`
		Target string `json:"target"`
		Object struct {
			ID string `json:"id"`
		} `json:"object"`
	}
	if err := json.Unmarshal([]byte(ev.data), &data); err != nil || ev.id != "1" || data.Type != "Add" ||
		data.Object.ID != created["id"] || data.Target != a.cfg.BaseURL+"/users/alice/outbox" {
		t.Fatalf("event %s %s (%v), want the Add of %v", ev.id, ev.data, err, created["id"])
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mresp, err := http.Get("http://" + a.opsListener.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`courier_app_stream_events_total{collection="outbox"} 1`, `courier_app_streams{collection="inbox"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
