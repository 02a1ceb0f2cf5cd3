package interop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

const publicCollection = "https://www.w3.org/ns/activitystreams#Public"

// TestFedifyPeer runs courier against the Fedify peer, both ways:
//
//   - the peer looks up a courier actor by its URL and by WebFinger (over
//     https: courier's origin is a TLS proxy whose certificate the peer
//     trusts), follows it and gets the Accept, then receives the Create, the
//     Update and the Delete of a note courier's actor posts, each verified by
//     Fedify (inbox listeners fire only for verified activities) and checked
//     once more by the peer's own verifyRequest call;
//   - the peer's actor posts a Create of a note and a Like of courier's note,
//     signed by Fedify; courier verifies and imports them: the note is in
//     courier's database and the like is counted in the note's likes
//     collection.
func TestFedifyPeer(t *testing.T) {
	t.Parallel()
	node := prerequisites(t)
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)

	bin := courierBinary(t)
	built := time.Now()
	dir := t.TempDir()
	c := startCourier(t, ctx, bin, dir)
	actor, token := c.createActor(t, ctx, "alice")
	p := startPeer(t, ctx, node, c.caFile)
	t.Logf("courier %s (actor %s) and the Fedify peer %s are up in %s (courier built in %s)",
		c.origin, actor, p.origin, time.Since(built).Round(time.Millisecond), built.Sub(started).Round(time.Millisecond))
	proxyHost := strings.TrimPrefix(c.origin, "https://")

	var note string // the id of the note courier's actor posts
	// Every step needs the ones before it: stop at the first that fails.
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"peer looks up the courier actor by its URL", func(t *testing.T) {
			var got lookupResult
			if err := p.control(ctx, "lookup", map[string]string{"target": actor}, &got); err != nil {
				t.Fatal(err)
			}
			checkActor(t, got, actor)
		}},
		{"peer finds the courier actor by WebFinger over https", func(t *testing.T) {
			for _, handle := range []string{"@alice@" + proxyHost, "acct:alice@" + proxyHost} {
				var got lookupResult
				if err := p.control(ctx, "lookup", map[string]string{"target": handle}, &got); err != nil {
					t.Fatalf("%s: %v", handle, err)
				}
				checkActor(t, got, actor)
			}
		}},
		{"peer follows and receives the Accept", func(t *testing.T) {
			var follow struct {
				ID string `json:"id"`
			}
			if err := p.control(ctx, "follow", map[string]string{"target": actor}, &follow); err != nil {
				t.Fatal(err)
			}
			accept, err := p.wait(stepTimeout, func(e peerEvent) bool {
				return e.Event == "received" && e.Type == "Accept"
			})
			if err != nil {
				t.Fatalf("Accept of the Follow %s: %v", follow.ID, err)
			}
			if accept.Actor != actor || accept.ObjectID != follow.ID {
				t.Errorf("the Accept is by %s of %s, want by %s of the Follow %s", accept.Actor, accept.ObjectID, actor, follow.ID)
			}
			checkDelivery(t, p, accept.ID, actor)
			if err := eventually(ctx, func() error { return followersInclude(ctx, c, p.actor) }); err != nil {
				t.Error(err)
			}
		}},
		{"peer receives the Create of a note", func(t *testing.T) {
			content := "Hello from courier to Fedify"
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Note",
				"content":  content,
				"to":       []string{publicCollection},
				"cc":       []string{actor + "/followers"},
			})
			note = act.objectID
			got := receivedAbout(t, p, "Create", act.id)
			if got.Object == nil || got.Object.ID != note {
				t.Fatalf("the Create carries %+v, want the note %s", got.Object, note)
			}
			if got.Object.Type != "Note" || !strings.Contains(got.Object.Content, content) || got.Object.AttributedTo != actor {
				t.Errorf("the peer read the note as %+v, want a Note by %s with %q", *got.Object, actor, content)
			}
			if !slices.Contains(got.Object.To, publicCollection) {
				t.Errorf("the peer reads the note's audience as to=%v cc=%v, want it public", got.Object.To, got.Object.Cc)
			}
			checkDelivery(t, p, act.id, actor)
		}},
		{"courier counts the peer's Like of the note", func(t *testing.T) {
			var like struct {
				Object string `json:"object"`
			}
			if err := p.control(ctx, "like", map[string]string{"target": actor, "object": note}, &like); err != nil {
				t.Fatal(err)
			}
			err := eventually(ctx, func() error {
				n, err := likes(ctx, c, note)
				if err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("the note's likes totalItems is %d, want 1", n)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				t.Log(inboxOutcomes(t, ctx, c, p.actor))
			}
		}},
		{"courier imports the peer's Create of a note", func(t *testing.T) {
			content := "<p>Hello from Fedify to courier</p>"
			var sent struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			}
			if err := p.control(ctx, "create", map[string]string{"target": actor, "content": content}, &sent); err != nil {
				t.Fatal(err)
			}
			db := c.database(t)
			err := eventually(ctx, func() error {
				var gotContent, attributedTo, visibility string
				var deleted sql.NullInt64
				err := db.QueryRowContext(ctx,
					`SELECT content, attributed_to, visibility, deleted_at FROM objects WHERE uri = ?`, sent.Object).
					Scan(&gotContent, &attributedTo, &visibility, &deleted)
				if errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("the note %s is not in courier's objects table", sent.Object)
				}
				if err != nil {
					return err
				}
				if gotContent != content || attributedTo != p.actor || deleted.Valid {
					return fmt.Errorf("courier stored the note as content=%q attributed_to=%s deleted=%v, want %q by %s",
						gotContent, attributedTo, deleted.Valid, content, p.actor)
				}
				if visibility != "public" {
					return fmt.Errorf("courier stored the note with visibility %q, want public", visibility)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				t.Log(inboxOutcomes(t, ctx, c, p.actor))
			}
		}},
		{"peer receives the Update of the note", func(t *testing.T) {
			content := "Hello from courier to Fedify, edited"
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Update",
				"object":   map[string]any{"id": note, "type": "Note", "content": content},
			})
			got := receivedAbout(t, p, "Update", act.id)
			if got.Object == nil || got.Object.ID != note || !strings.Contains(got.Object.Content, content) {
				t.Errorf("the Update carries %+v, want the note %s with %q", got.Object, note, content)
			}
			checkDelivery(t, p, act.id, actor)
		}},
		{"peer receives the Delete of the note", func(t *testing.T) {
			act := c2s(t, ctx, c, token, map[string]any{
				"@context": "https://www.w3.org/ns/activitystreams",
				"type":     "Delete",
				"object":   note,
			})
			got := receivedAbout(t, p, "Delete", act.id)
			if got.ObjectID != note {
				t.Errorf("the Delete is of %s, want the note %s", got.ObjectID, note)
			}
			checkDelivery(t, p, act.id, actor)
			resp, _, err := c.do(ctx, http.MethodGet, note, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusGone {
				t.Errorf("GET of the deleted note: %s, want 410 Gone", resp.Status)
			}
		}},
	}

	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Logf("stopped after %q failed", s.name)
			break
		}
	}

	// Across the whole run: every delivery to the peer verified, Fedify
	// raised no inbox error, courier logged nothing an operator must act on
	// and, when built with -race, reported no data race.
	for _, e := range p.all() {
		switch e.Event {
		case "delivery":
			if !e.Verified || e.Status/100 != 2 {
				t.Errorf("a delivery to the peer was not accepted: %s", e.raw)
			}
		case "inbox_error":
			t.Errorf("the peer's inbox failed: %s", e.Error)
		}
	}
	if errs := c.errorLogs(); len(errs) > 0 {
		t.Errorf("courier logged %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	if races := c.raceReports(); len(races) > 0 {
		t.Errorf("courier reported %d data races", len(races))
	}
	t.Logf("the interoperability run took %s (after the build: %s)",
		time.Since(started).Round(time.Millisecond), time.Since(built).Round(time.Millisecond))
}

// lookupResult is the peer's view of a looked-up actor.
type lookupResult struct {
	ID                string `json:"id"`
	Type              string `json:"type"`
	PreferredUsername string `json:"preferredUsername"`
	Inbox             string `json:"inbox"`
	SharedInbox       string `json:"sharedInbox"`
	PublicKey         *struct {
		ID    string `json:"id"`
		Owner string `json:"owner"`
	} `json:"publicKey"`
}

// checkActor checks the peer's view of courier's actor.
func checkActor(t *testing.T, got lookupResult, actor string) {
	t.Helper()
	if got.ID != actor || got.Type != "Person" || got.PreferredUsername != "alice" {
		t.Errorf("the peer sees %s %s (%q), want Person %s (alice)", got.Type, got.ID, got.PreferredUsername, actor)
	}
	if got.Inbox != actor+"/inbox" {
		t.Errorf("the peer sees the inbox %q, want %s/inbox", got.Inbox, actor)
	}
	if got.PublicKey == nil || got.PublicKey.ID != actor+"#main-key" || got.PublicKey.Owner != actor {
		t.Errorf("the peer sees the public key %+v, want %s#main-key owned by %s", got.PublicKey, actor, actor)
	}
}

// checkDelivery checks the peer's own verification of the delivery that
// brought activity id: signed by the actor's main key, verified, accepted.
func checkDelivery(t *testing.T, p *peer, id, actor string) {
	t.Helper()
	d, err := p.wait(stepTimeout, func(e peerEvent) bool {
		got, _ := e.deliveredActivity()
		return e.Event == "delivery" && got == id
	})
	if err != nil {
		t.Errorf("delivery of %s: %v", id, err)
		return
	}
	if !d.Verified || d.VerifiedKey != actor+"#main-key" || d.KeyOwner != actor {
		t.Errorf("the peer's signature check of %s: %s", id, d.raw)
	}
	if d.Status != http.StatusAccepted && d.Status != http.StatusOK {
		t.Errorf("the peer answered the delivery of %s with %d", id, d.Status)
	}
	if !strings.HasPrefix(d.ContentType, "application/activity+json") &&
		!strings.HasPrefix(d.ContentType, "application/ld+json") {
		t.Errorf("the delivery of %s has Content-Type %q", id, d.ContentType)
	}
	for _, h := range []string{"(request-target)", "host", "date", "digest"} {
		if !slices.Contains(strings.Fields(d.SignedHeaders), h) {
			t.Errorf("the delivery of %s does not sign %s (headers=%q)", id, h, d.SignedHeaders)
		}
	}
}

// receivedAbout waits for the peer's inbox to take the activity id of type
// typ.
func receivedAbout(t *testing.T, p *peer, typ, id string) peerEvent {
	t.Helper()
	e, err := p.wait(stepTimeout, func(e peerEvent) bool {
		return e.Event == "received" && e.ID == id
	})
	if err != nil {
		t.Fatalf("%s %s at the peer: %v", typ, id, err)
	}
	if e.Type != typ {
		t.Fatalf("the peer received %s as a %s, want %s", id, e.Type, typ)
	}
	if e.ObjectError != "" {
		t.Errorf("the peer could not read the object of %s: %s", id, e.ObjectError)
	}
	return e
}

// written is a client-to-server write courier accepted.
type written struct {
	id       string // the activity id (Location)
	objectID string // the id of its object
}

// c2s posts activity to the outbox of the actor of token and returns what
// courier created.
func c2s(t *testing.T, ctx context.Context, c *courier, token string, activity map[string]any) written {
	t.Helper()
	resp, body, err := c.do(ctx, http.MethodPost, "/users/alice/outbox", token, activity)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /users/alice/outbox %v: %s: %s", activity["type"], resp.Status, body)
	}
	var doc struct {
		ID     string          `json:"id"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the outbox answered %q: %v", body, err)
	}
	if loc := resp.Header.Get("Location"); loc != doc.ID {
		t.Errorf("Location %q is not the activity's id %q", loc, doc.ID)
	}
	w := written{id: doc.ID}
	var ref struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(doc.Object, &w.objectID) != nil && json.Unmarshal(doc.Object, &ref) == nil {
		w.objectID = ref.ID
	}
	if w.id == "" || w.objectID == "" {
		t.Fatalf("the outbox answered %s without an activity or object id", body)
	}
	return w
}

// followersInclude checks that courier lists follower among alice's
// followers.
func followersInclude(ctx context.Context, c *courier, follower string) error {
	resp, body, err := c.do(ctx, http.MethodGet, "/users/alice/followers?page=1", "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET followers: %s", resp.Status)
	}
	var page struct {
		TotalItems   int      `json:"totalItems"`
		OrderedItems []string `json:"orderedItems"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return fmt.Errorf("followers page %q: %w", body, err)
	}
	if page.TotalItems != 1 || !slices.Contains(page.OrderedItems, follower) {
		return fmt.Errorf("courier lists the followers %v (totalItems %d), want exactly %s", page.OrderedItems, page.TotalItems, follower)
	}
	return nil
}

// likes returns the likes totalItems of a courier note, read from its
// document.
func likes(ctx context.Context, c *courier, note string) (int, error) {
	resp, body, err := c.do(ctx, http.MethodGet, note, "", nil)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", note, resp.Status)
	}
	var doc struct {
		Likes *struct {
			TotalItems int `json:"totalItems"`
		} `json:"likes"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return 0, fmt.Errorf("the note's document %q: %w", body, err)
	}
	if doc.Likes == nil {
		return 0, fmt.Errorf("the note's document has no likes collection: %s", body)
	}
	return doc.Likes.TotalItems, nil
}

// inboxOutcomes describes what courier recorded of the activities from
// actor, for a failure report.
func inboxOutcomes(t *testing.T, ctx context.Context, c *courier, actor string) string {
	rows, err := c.database(t).QueryContext(ctx,
		`SELECT activity_id, type, COALESCE(outcome, '(not imported)') FROM inbox_activities WHERE actor = ? ORDER BY received_at`, actor)
	if err != nil {
		return fmt.Sprintf("courier's inbox record cannot be read: %v", err)
	}
	defer rows.Close()
	var b strings.Builder
	b.WriteString("courier's inbox record of the peer's activities:")
	for rows.Next() {
		var id, typ, outcome string
		if err := rows.Scan(&id, &typ, &outcome); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "\n  %s %s: %s", typ, id, outcome)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return b.String()
}
