package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// c2s posts body to name's outbox with token over a's listener; it
// returns the status and the decoded answer.
func c2s(t *testing.T, a *app, name, token string, body map[string]any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, a.cfg.BaseURL+"/users/"+name+"/outbox", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m
}

// totalItems returns the totalItems of the collection at path.
func totalItems(t *testing.T, a *app, path string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, a.cfg.BaseURL+path, nil)
	req.Header.Set("Accept", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct{ TotalItems float64 }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m.TotalItems
}

// TestLocalActorsOverC2S: on a running courier, alice follows locked bob
// through her outbox (pending until bob's C2S Accept of the Follow), the
// follow shows in both collections, a second Follow is 409 naming the
// first, and bob's public note and alice's direct note each reach the
// other once; no POST goes over HTTP to courier itself.
func TestLocalActorsOverC2S(t *testing.T) {
	t.Parallel()
	a, _ := startApp(t, func(c *Config) {})
	ctx := context.Background()
	alice, aliceToken, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	bob, bobToken, err := a.store.CreateActor(ctx, store.NewActor{Name: "bob", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	st, follow := c2s(t, a, "alice", aliceToken, map[string]any{"type": "Follow", "object": bob.URI})
	if st != http.StatusCreated {
		t.Fatalf("Follow of a local actor: %d %v", st, follow)
	}
	waitFor(t, "bob's pending request", func() bool {
		_, n, err := a.store.Followers(ctx, bob.ID, store.StatePending, 0, 10)
		return err == nil && n == 1
	})
	if st, body := c2s(t, a, "alice", aliceToken, map[string]any{"type": "Follow", "object": bob.URI}); st != http.StatusConflict || body["existing"] != follow["id"] {
		t.Fatalf("second Follow: %d %v", st, body)
	}
	if st, body := c2s(t, a, "bob", bobToken, map[string]any{"type": "Accept", "object": follow["id"]}); st != http.StatusCreated {
		t.Fatalf("bob's Accept: %d %v", st, body)
	}
	waitFor(t, "alice's follow accepted", func() bool {
		s, err := a.store.FollowingState(ctx, alice.ID, bob.URI)
		return err == nil && s == store.StateAccepted
	})
	if f, g := totalItems(t, a, "/users/bob/followers"), totalItems(t, a, "/users/alice/following"); f != 1 || g != 1 {
		t.Fatalf("bob's followers %v, alice's following %v", f, g)
	}

	imported := func(activityID string) (outcome, box string) {
		t.Helper()
		err := a.db.Read.QueryRowContext(ctx, `SELECT COALESCE(outcome, ''), inbox FROM inbox_activities WHERE activity_id = ?`,
			activityID).Scan(&outcome, &box)
		if err != nil {
			return "", ""
		}
		return outcome, box
	}
	_, note := c2s(t, a, "bob", bobToken, map[string]any{"type": "Note", "content": "hello alice",
		"to": []string{activitypub.Public}, "cc": []string{bob.URI + "/followers"}})
	_, dm := c2s(t, a, "alice", aliceToken, map[string]any{"type": "Note", "content": "psst", "to": []string{bob.URI}})
	for _, c := range []struct {
		act map[string]any
		box string
	}{{note, "alice"}, {dm, "bob"}} {
		id, _ := c.act["id"].(string)
		waitFor(t, "the note imported for "+c.box, func() bool { o, _ := imported(id); return o != "" })
		if o, box := imported(id); o != "local" || box != c.box {
			t.Fatalf("%s imported as %q for %q, want local for %s", id, o, box, c.box)
		}
	}
	var posts int
	if err := a.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_queue WHERE type = 'delivery.post'`).Scan(&posts); err != nil || posts != 0 {
		t.Fatalf("%d POSTs queued (%v)", posts, err)
	}
}
