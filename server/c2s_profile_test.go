package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestC2SUpdateProfileFields: an Update of the actor sets icon, image,
// attachment fields, manuallyApprovesFollowers, discoverable, indexable and
// alsoKnownAs; the federated Update and the served actor carry them, and
// the served document sent back unchanged changes nothing.
func TestC2SUpdateProfileFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.post(t, "alice", b.token, map[string]any{
		"@context": []any{activitypub.ActivityStreams, map[string]any{"schema": "http://schema.org#"}},
		"type":     "Update",
		"object": map[string]any{
			"id": b.alice.URI, "type": "Person", "name": "Alice",
			"icon":  map[string]any{"type": "Image", "mediaType": "image/png", "url": "https://media.example/alice.png"},
			"image": "https://media.example/header.jpg",
			"attachment": []any{
				map[string]any{"type": "PropertyValue", "name": "Website", "value": "https://alice.example"},
				map[string]any{"type": "PropertyValue", "name": "Pronouns", "value": "she &amp; her"},
			},
			"manuallyApprovesFollowers": true, "discoverable": true, "indexable": false,
			"alsoKnownAs": []string{"https://old.example/users/alice"},
		},
	})
	act := b.created(t, r, "Update")
	check := func(where string, doc map[string]any) {
		t.Helper()
		icon, _ := doc["icon"].(map[string]any)
		image, _ := doc["image"].(map[string]any)
		att, _ := doc["attachment"].([]any)
		aka, _ := doc["alsoKnownAs"].([]any)
		if icon["url"] != "https://media.example/alice.png" || icon["mediaType"] != "image/png" || icon["type"] != "Image" ||
			image["url"] != "https://media.example/header.jpg" || len(att) != 2 || len(aka) != 1 ||
			aka[0] != "https://old.example/users/alice" || doc["manuallyApprovesFollowers"] != true ||
			doc["discoverable"] != true || doc["indexable"] != false || doc["name"] != "Alice" {
			t.Fatalf("%s: %v", where, doc)
		}
		site, pron := att[0].(map[string]any), att[1].(map[string]any)
		if site["type"] != "PropertyValue" || site["name"] != "Website" ||
			site["value"] != `<a href="https://alice.example" rel="me nofollow noopener noreferrer" target="_blank">https://alice.example</a>` ||
			pron["value"] != "she &amp; her" {
			t.Fatalf("%s: fields %v", where, att)
		}
	}
	var federated map[string]any
	if err := json.Unmarshal(act.ObjectRaw, &federated); err != nil {
		t.Fatal(err)
	}
	check("the federated Update", federated)
	served := b.get(t, "/users/alice")
	check("the served actor", served.json(t))
	if a, _ := b.st.ActorByName(b.ctx, "alice"); !a.ManuallyApprovesFollowers || a.Profile.Fields[1].Value != "she & her" {
		t.Fatalf("stored %+v", a.Profile)
	}

	// The served document sent back is kept as it was.
	var whole map[string]any
	if err := json.Unmarshal(served.Body, &whole); err != nil {
		t.Fatal(err)
	}
	b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Update", "object": whole}), "Update")
	check("after sending the document back", b.get(t, "/users/alice").json(t))

	// null clears.
	b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Update", "object": map[string]any{
		"id": b.alice.URI, "icon": nil, "attachment": []any{}, "alsoKnownAs": nil}}), "Update")
	doc := b.get(t, "/users/alice").json(t)
	for _, k := range []string{"icon", "attachment", "alsoKnownAs"} {
		if _, ok := doc[k]; ok {
			t.Fatalf("%s not cleared: %v", k, doc)
		}
	}
	if doc["image"] == nil || doc["discoverable"] != true {
		t.Fatalf("what the Update did not name changed: %v", doc)
	}
}

// TestC2SUpdateProfileRefused: what courier cannot keep is refused by name
// with 422 and changes nothing.
func TestC2SUpdateProfileRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	many := make([]any, store.MaxProfileFields+1)
	for i := range many {
		many[i] = map[string]any{"type": "PropertyValue", "name": "n", "value": "v"}
	}
	for _, c := range []struct {
		name string
		obj  map[string]any
		want string // in the message
	}{
		{"unknown properties", map[string]any{"name": "x", "movedTo": "https://a.example/u", "vcard:bday": "2000"}, "movedTo, vcard:bday"},
		{"content", map[string]any{"content": "hi"}, "content"},
		{"changed inbox", map[string]any{"inbox": "https://evil.example/inbox"}, "inbox"},
		{"http icon", map[string]any{"icon": "http://media.example/a.png"}, "https"},
		{"relative image", map[string]any{"image": map[string]any{"type": "Image", "url": "/a.png"}}, "https"},
		{"javascript icon", map[string]any{"icon": "javascript:alert(1)"}, "https"},
		{"icon not an image type", map[string]any{"icon": map[string]any{"type": "Image", "url": "https://m.example/a", "mediaType": "text/html"}}, "mediaType"},
		{"icon with blurhash", map[string]any{"icon": map[string]any{"type": "Image", "url": "https://m.example/a", "blurhash": "x"}}, "blurhash"},
		{"too many fields", map[string]any{"attachment": many}, "at most"},
		{"HTML value", map[string]any{"attachment": []any{map[string]any{"type": "PropertyValue", "name": "n", "value": "<b>x</b>"}}}, "markup"},
		{"Image attachment", map[string]any{"attachment": []any{map[string]any{"type": "Image", "url": "https://m.example/a"}}}, "PropertyValue"},
		{"long value", map[string]any{"attachment": []any{map[string]any{"type": "PropertyValue", "name": "n", "value": strings.Repeat("v", store.MaxFieldValueLen+1)}}}, "longer"},
		{"relative alsoKnownAs", map[string]any{"alsoKnownAs": []string{"acct:bob@a.example"}}, "alsoKnownAs"},
		{"discoverable not a bool", map[string]any{"discoverable": "yes"}, "discoverable"},
	} {
		c.obj["id"] = b.alice.URI
		r := b.post(t, "alice", b.token, map[string]any{"type": "Update", "object": c.obj})
		wantStatus(t, r, http.StatusUnprocessableEntity)
		if !strings.Contains(string(r.Body), c.want) {
			t.Errorf("%s: %s does not name %q", c.name, r.Body, c.want)
		}
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities`); n != 0 {
		t.Fatalf("%d activities after refused Updates", n)
	}
	if a, _ := b.st.ActorByName(b.ctx, "alice"); a.DisplayName != "ALICE" || a.Profile.Icon != nil {
		t.Fatalf("a refused Update changed the actor: %+v", a)
	}
}

// TestC2SProfileHTTPWithAllowPrivate: with AllowPrivateAddresses an http
// icon is kept.
func TestC2SProfileHTTPWithAllowPrivate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := New(Config{Store: b.st, AllowPrivateAddresses: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/users/alice/outbox", strings.NewReader(
		`{"type":"Update","object":{"id":"`+b.alice.URI+`","icon":"http://127.0.0.1:9/a.png"}}`))
	req.Header.Set("Content-Type", apJSON)
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if a, _ := b.st.ActorByName(b.ctx, "alice"); a.Profile.Icon == nil || a.Profile.Icon.URL != "http://127.0.0.1:9/a.png" {
		t.Fatalf("icon %+v", a.Profile.Icon)
	}
}

// TestC2SFeatured: an Add to the featured collection pins an own public
// note (served embedded in featured, federated with the collection as
// target), a second Add is 409, a Remove unpins, and what cannot be pinned
// is refused.
func TestC2SFeatured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	featured := b.base + "/users/alice/featured"
	note := b.note(t, "alice", b.token, "pin me")
	act := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Add", "object": note, "target": featured}), "Add")
	if act.Target != featured || act.ObjectID != note || strings.Join(act.To, " ") != store.Public ||
		strings.Join(act.Cc, " ") != b.base+"/users/alice/followers" {
		t.Fatalf("Add %s", act.Raw)
	}
	coll := b.get(t, "/users/alice/featured").json(t)
	items, _ := coll["orderedItems"].([]any)
	if coll["totalItems"] != float64(1) || len(items) != 1 || items[0].(map[string]any)["id"] != note ||
		items[0].(map[string]any)["content"] != "pin me" {
		t.Fatalf("featured %v", coll)
	}
	wantStatus(t, b.post(t, "alice", b.token, map[string]any{"type": "Add", "object": note, "target": featured}), http.StatusConflict)

	_, bobToken := b.actor(t, "bob")
	bobNote := b.note(t, "bob", bobToken, "bob's")
	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
	}{
		{"another's note", map[string]any{"type": "Add", "object": bobNote, "target": featured}, http.StatusForbidden},
		{"a remote note", map[string]any{"type": "Add", "object": "https://remote.test/notes/1", "target": featured}, http.StatusUnprocessableEntity},
		{"another collection", map[string]any{"type": "Add", "object": note, "target": b.base + "/users/alice/followers"}, http.StatusUnprocessableEntity},
		{"no target", map[string]any{"type": "Add", "object": note}, http.StatusUnprocessableEntity},
		{"remove what is not pinned", map[string]any{"type": "Remove", "object": bobNote, "target": featured}, http.StatusNotFound},
	} {
		r := b.post(t, "alice", b.token, c.body)
		if r.StatusCode != c.status {
			t.Errorf("%s: %d, want %d: %s", c.name, r.StatusCode, c.status, r.Body)
		}
	}

	rm := b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Remove", "object": note, "target": featured}), "Remove")
	if rm.Target != featured || rm.ObjectID != note {
		t.Fatalf("Remove %s", rm.Raw)
	}
	if coll := b.get(t, "/users/alice/featured").json(t); coll["totalItems"] != float64(0) {
		t.Fatalf("featured after the Remove %v", coll)
	}

	// A deleted note leaves the collection.
	b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Add", "object": note, "target": featured}), "Add")
	b.created(t, b.post(t, "alice", b.token, map[string]any{"type": "Delete", "object": note}), "Delete")
	if coll := b.get(t, "/users/alice/featured").json(t); coll["totalItems"] != float64(0) {
		t.Fatalf("featured after the Delete %v", coll)
	}
}
