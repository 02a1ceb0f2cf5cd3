package app_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/courier-ap/courier/app"
)

// TestEventShapes: each kind of inbox item becomes the event the SSE draft
// describes.
func TestEventShapes(t *testing.T) {
	const inbox = "https://courier.example/users/alice/inbox"
	for _, c := range []struct {
		typ, doc string
		want     map[string]any
	}{
		{"Create", `{"id":"https://r.example/a/1","type":"Create","actor":"https://r.example/u","object":{"id":"https://r.example/n/1","type":"Note","content":"<p>a & b</p>"}}`,
			map[string]any{"type": "Add", "target": inbox, "object": map[string]any{"id": "https://r.example/a/1", "type": "Create",
				"actor": "https://r.example/u", "object": map[string]any{"id": "https://r.example/n/1", "type": "Note", "content": "<p>a & b</p>"}}}},
		{"Update", `{"id":"https://r.example/a/2","type":"Update","actor":"https://r.example/u","object":{"id":"https://r.example/n/1","type":"Note","content":"edited"}}`,
			map[string]any{"type": "Update", "id": "https://r.example/a/2", "actor": "https://r.example/u",
				"object": map[string]any{"id": "https://r.example/n/1", "type": "Note", "content": "edited"}}},
		{"Delete", `{"id":"https://r.example/a/3","type":"Delete","actor":"https://r.example/u","object":{"id":"https://r.example/n/1","type":"Tombstone"}}`,
			map[string]any{"type": "Delete", "id": "https://r.example/a/3", "actor": "https://r.example/u", "object": "https://r.example/n/1"}},
		{"Undo", `{"id":"https://r.example/a/4","type":"Undo","actor":"https://r.example/u","object":"https://r.example/likes/9"}`,
			map[string]any{"type": "Remove", "target": inbox, "object": "https://r.example/likes/9"}},
	} {
		data, err := app.Event(inbox, c.typ, json.RawMessage(c.doc))
		if err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		var got map[string]any
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s: %s: %v", c.typ, data, err)
		}
		if got["@context"] != "https://www.w3.org/ns/activitystreams" {
			t.Errorf("%s: @context %v", c.typ, got["@context"])
		}
		delete(got, "@context")
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.typ, got, c.want)
		}
		for _, b := range data {
			if b == '\n' {
				t.Errorf("%s: the data holds a newline: %s", c.typ, data)
			}
		}
	}
	if _, err := app.Event(inbox, "Create", json.RawMessage(`not json`)); err == nil {
		t.Error("an unreadable document made an event")
	}
}
