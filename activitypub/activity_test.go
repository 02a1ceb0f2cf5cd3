package activitypub

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestParseActivityFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file                     string
		id, typ, actor, objectID string
		objectType               string // "" when the object is given by id only
		to0                      string
		wantPublished            bool
	}{
		{"fediverse/mastodon/activities/create_note.json", "https://mastodon.madrid/users/felix/statuses/107224289116410645/activity", "Create", "https://mastodon.madrid/users/felix", "https://mastodon.madrid/users/felix/statuses/107224289116410645", "Note", "https://mastodon.madrid/users/felix/followers", true},
		{"fediverse/mastodon/activities/follow.json", "", "Follow", "", "", "", "", false},
		{"fediverse/mastodon/activities/undo_follow.json", "", "Undo", "", "", "Follow", "", false},
		{"fediverse/mastodon/activities/delete.json", "", "Delete", "", "", "Tombstone", "", false},
		{"fediverse/mastodon/activities/flag.json", "", "Flag", "", "", "", "", false},
		{"fediverse/lemmy/activities/community/announce_create_page.json", "", "Announce", "", "", "Create", "", false},
		{"fediverse/lemmy/activities/following/accept.json", "", "Accept", "", "", "Follow", "", false},
		{"fediverse/lemmy/activities/block/block_user.json", "", "Block", "", "", "", "", false},
		{"fediverse/pleroma/activities/create_note.json", "", "Create", "", "", "Note", "", false},
		{"fediverse/peertube/activities/announce_video.json", "", "Announce", "", "", "", "", false},
		{"fediverse/mitra/activities/accept.json", "", "Accept", "", "", "", "", false},
		{"fediverse/friendica/activities/create_note.json", "", "Create", "", "", "Note", "", false},
		{"fediverse/gnusocial/activities/create_note.json", "", "Create", "", "", "Note", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			data := readTestdata(t, tt.file)
			a, err := ParseActivity(data)
			if err != nil {
				t.Fatalf("ParseActivity: %v", err)
			}
			// Cross-check against a plain decode of the same file.
			var plain map[string]any
			if err := json.Unmarshal(data, &plain); err != nil {
				t.Fatal(err)
			}
			if a.ID != plain["id"] || a.Type != tt.typ {
				t.Errorf("id/type = %q/%q, want %v/%q", a.ID, a.Type, plain["id"], tt.typ)
			}
			if tt.id != "" && a.ID != tt.id {
				t.Errorf("id = %q, want %q", a.ID, tt.id)
			}
			if tt.actor != "" && a.Actor != tt.actor {
				t.Errorf("actor = %q, want %q", a.Actor, tt.actor)
			}
			if s, ok := plain["actor"].(string); ok && a.Actor != s {
				t.Errorf("actor = %q, want %q", a.Actor, s)
			}
			switch o := plain["object"].(type) {
			case string:
				if a.ObjectID != o || a.Object != nil {
					t.Errorf("object = %q (embedded %v), want id %q", a.ObjectID, a.Object, o)
				}
			case map[string]any:
				if a.Object == nil {
					t.Fatalf("embedded object not decoded")
				}
				if id, _ := o["id"].(string); a.ObjectID != id || a.Object.ID != id {
					t.Errorf("object id = %q/%q, want %q", a.ObjectID, a.Object.ID, id)
				}
				if a.Object.Type != tt.objectType {
					t.Errorf("object type = %q, want %q", a.Object.Type, tt.objectType)
				}
				if len(a.ObjectRaw) == 0 {
					t.Errorf("ObjectRaw empty")
				}
			}
			if tt.objectID != "" && a.ObjectID != tt.objectID {
				t.Errorf("object id = %q, want %q", a.ObjectID, tt.objectID)
			}
			if want := IDs(mustRaw(t, plain["to"])); !reflect.DeepEqual(a.To, want) {
				t.Errorf("to = %q, want %q", a.To, want)
			}
			if tt.to0 != "" && (len(a.To) == 0 || a.To[0] != tt.to0) && (len(a.Cc) == 0 || a.Cc[0] != tt.to0) {
				t.Errorf("addressing %q/%q lacks %q", a.To, a.Cc, tt.to0)
			}
			if tt.wantPublished && a.Published.IsZero() {
				t.Errorf("published not parsed")
			}
			if string(a.Raw) == "" {
				t.Errorf("Raw empty")
			}
		})
	}
}

func mustRaw(t testing.TB, v any) json.RawMessage {
	t.Helper()
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseActivityTolerance(t *testing.T) {
	t.Parallel()
	a, err := ParseActivity([]byte(`{
		"id": "https://x.example/a/1",
		"type": ["Create", "Other"],
		"actor": [{"type": "Person", "id": "https://x.example/u/1"}, "https://x.example/u/2"],
		"object": {"id": "https://x.example/n/1", "type": "Note",
			"attributedTo": [{"type": "Person", "id": "https://x.example/u/1"}, {"type": "Group", "id": "https://x.example/g/1"}],
			"contentMap": {"fr": "bonjour"}, "content": null, "summary": {"de": "b", "en": "a"},
			"to": "https://www.w3.org/ns/activitystreams#Public",
			"tag": {"type": "Hashtag", "name": "#go", "href": "https://x.example/tags/go"},
			"url": [{"type": "Link", "href": "https://x.example/@u/1"}],
			"inReplyTo": {"id": "https://y.example/n/9"}, "published": "2024-05-06T07:08:09.123+02:00",
			"sensitive": "yes"},
		"to": ["https://www.w3.org/ns/activitystreams#Public", 42, {"id": ""}, null],
		"cc": "https://x.example/u/1/followers",
		"target": {"id": "https://x.example/c/1", "type": "Collection"},
		"published": "not a date"
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Type != "Create" || a.Actor != "https://x.example/u/1" || a.Target != "https://x.example/c/1" {
		t.Errorf("type/actor/target = %q/%q/%q", a.Type, a.Actor, a.Target)
	}
	if !reflect.DeepEqual(a.To, []string{Public}) || !reflect.DeepEqual(a.Cc, []string{"https://x.example/u/1/followers"}) {
		t.Errorf("to/cc = %q/%q", a.To, a.Cc)
	}
	if !a.Published.IsZero() {
		t.Errorf("bad published parsed as %v", a.Published)
	}
	o := a.Object
	if o == nil {
		t.Fatal("no object")
	}
	if !reflect.DeepEqual(o.AttributedTo, []string{"https://x.example/u/1", "https://x.example/g/1"}) {
		t.Errorf("attributedTo = %q", o.AttributedTo)
	}
	if o.Summary != "a" || o.URL != "https://x.example/@u/1" || o.InReplyTo != "https://y.example/n/9" {
		t.Errorf("summary/url/inReplyTo = %q/%q/%q", o.Summary, o.URL, o.InReplyTo)
	}
	if want := time.Date(2024, 5, 6, 5, 8, 9, 123e6, time.UTC); !o.Published.Equal(want) {
		t.Errorf("published = %v, want %v", o.Published, want)
	}
	if len(o.Tag) != 1 || o.Tag[0] != (Tag{Type: "Hashtag", Name: "#go", Href: "https://x.example/tags/go"}) {
		t.Errorf("tag = %+v", o.Tag)
	}
}

func TestParseActivityRequiredFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc   string
		field string
	}{
		{`{"type":"Create","actor":"https://a"}`, "id"},
		{`{"id":"https://a/1","actor":"https://a"}`, "type"},
		{`{"id":"https://a/1","type":"Create"}`, "actor"},
		{`{"id":"https://a/1","type":"Create","actor":""}`, "actor"},
		{`{"id":"https://a/1","type":"Create","actor":{"type":"Person"}}`, "actor"},
		{`{"id":42,"type":"Create","actor":"https://a"}`, "id"},
	}
	for _, tt := range tests {
		_, err := ParseActivity([]byte(tt.doc))
		var mf *MissingFieldError
		if !errors.As(err, &mf) || mf.Field != tt.field || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want missing %s", tt.doc, err, tt.field)
		}
	}
	for _, doc := range []string{``, `[]`, `"x"`, `{`, `{"id": }`, `null`} {
		if _, err := ParseActivity([]byte(doc)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", doc, err)
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want []string
	}{
		{``, nil},
		{`null`, nil},
		{`"https://a"`, []string{"https://a"}},
		{`""`, nil},
		{`{"id":"https://a","type":"Person"}`, []string{"https://a"}},
		{`{"type":"Link","href":"https://l"}`, []string{"https://l"}},
		{`["https://a",{"id":"https://b"},{"href":"https://c"},1,null,"",[]]`, []string{"https://a", "https://b", "https://c"}},
		{`[]`, nil},
		{`42`, nil},
		{`true`, nil},
		{`[`, nil},
	}
	for _, tt := range tests {
		if got := IDs(json.RawMessage(tt.raw)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("IDs(%s) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestParseObject(t *testing.T) {
	t.Parallel()
	o, err := ParseObject(readTestdata(t, "fediverse/mastodon/objects/note_1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Type != "Note" || o.ID == "" || len(o.AttributedTo) != 1 || o.Content == "" {
		t.Errorf("note = %+v", o)
	}
	if _, err := ParseObject([]byte(`{"id":"x"}`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("object without type: %v", err)
	}
}
