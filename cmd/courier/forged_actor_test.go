package main

import (
	"bytes"
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

// TestNoteIsNoActorAcrossCouriers: on one courier a user cannot mint an
// actor on the server's origin, and another courier takes no object for
// one. Through courier A's outbox, a Note carrying an inbox, a
// preferredUsername and a publicKey is refused 422 naming the property,
// and so is the Update that would give it a key of its own. A note that
// carries them anyway (as a server that kept every property of a client's
// object stored it, written here through the store) is served by A, yet
// courier B refuses a Follow signed with the key on it (401), and stores
// neither the note as an actor nor the follow.
func TestNoteIsNoActorAcrossCouriers(t *testing.T) {
	t.Parallel()
	a, _ := startApp(t, func(c *Config) { c.AllowPrivateAddresses = true })
	b, _ := startApp(t, func(c *Config) { c.AllowPrivateAddresses = true })
	ctx := context.Background()
	mallory, token, err := a.store.CreateActor(ctx, store.NewActor{Name: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	bob, _, err := b.store.CreateActor(ctx, store.NewActor{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := activitypub.EncodePublicKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	admin := func(keyID, owner string) map[string]any {
		return map[string]any{
			"@context":          []any{activitypub.ActivityStreams, activitypub.SecurityContext},
			"type":              "Note",
			"content":           "hello",
			"to":                []any{activitypub.Public},
			"inbox":             a.cfg.BaseURL + "/users/mallory/inbox",
			"preferredUsername": "admin",
			"publicKey":         map[string]any{"id": keyID, "owner": owner, "publicKeyPem": pem},
		}
	}
	refused := func(what string, st int, body map[string]any) {
		t.Helper()
		msg, _ := body["error"].(string)
		if st != http.StatusUnprocessableEntity || !(strings.Contains(msg, `"inbox"`) ||
			strings.Contains(msg, `"publicKey"`) || strings.Contains(msg, `"preferredUsername"`)) {
			t.Fatalf("%s: %d %v, want 422 naming the property", what, st, body)
		}
	}
	st, body := c2s(t, a, "mallory", token, admin(mallory.URI+"#other", mallory.URI))
	refused("a Note with an inbox and a key", st, body)
	st, plainNote := c2s(t, a, "mallory", token, map[string]any{"type": "Note", "content": "hello", "to": []any{activitypub.Public}})
	if st != http.StatusCreated {
		t.Fatalf("a plain note: %d %v", st, plainNote)
	}
	noteID, _ := plainNote["object"].(map[string]any)["id"].(string)
	upd := admin(noteID+"#main-key", noteID)
	upd["id"] = noteID
	delete(upd, "@context")
	st, body = c2s(t, a, "mallory", token, map[string]any{"@context": []any{activitypub.ActivityStreams, activitypub.SecurityContext},
		"type": "Update", "object": upd})
	refused("the Update giving the note a key", st, body)

	// The same note, stored as it was before the rule: A serves it.
	doc := admin("", "")
	delete(doc, "@context")
	delete(doc, "type")
	_, o, err := a.store.CreateObject(ctx, mallory, store.ObjectInput{Type: "Note", Content: "hello",
		To: []string{activitypub.Public}, Properties: doc, Context: []any{activitypub.SecurityContext}})
	if err != nil {
		t.Fatal(err)
	}
	doc["publicKey"] = map[string]any{"id": o.URI + "#main-key", "owner": o.URI, "publicKeyPem": pem}
	if _, _, err := a.store.UpdateObject(ctx, mallory, o.URI, store.ObjectInput{Type: "Note", Content: "hello",
		Properties: doc, Context: []any{activitypub.SecurityContext}}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, o.URI, nil)
	req.Header.Set("Accept", activitypub.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(served, []byte(o.URI+"#main-key")) || !bytes.Contains(served, []byte(`"inbox"`)) {
		t.Fatalf("A serves the note: %d %s", resp.StatusCode, served)
	}

	// A Follow of bob signed with the note's key, as the note.
	follow, _ := json.Marshal(map[string]any{"@context": activitypub.ActivityStreams, "id": o.URI + "#follow",
		"type": "Follow", "actor": o.URI, "object": bob.URI})
	post, _ := http.NewRequest(http.MethodPost, bob.URI+"/inbox", bytes.NewReader(follow))
	post.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(post, follow, o.URI+"#main-key", key, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err = http.DefaultClient.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("B answered a Follow signed with a key on a note: %d %s, want 401", resp.StatusCode, answer)
	}
	var actors, activities int
	if err := b.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM remote_actors WHERE uri = ?`, o.URI).Scan(&actors); err != nil {
		t.Fatal(err)
	}
	if err := b.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox_activities`).Scan(&activities); err != nil {
		t.Fatal(err)
	}
	if actors != 0 || activities != 0 {
		t.Fatalf("B stored the note as an actor (%d) or the follow (%d)", actors, activities)
	}
}
