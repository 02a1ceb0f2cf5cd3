package activitypub

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewActivityDeterministic(t *testing.T) {
	t.Parallel()
	const base, ev, actor = "https://courier.example", "0190a8c2-6b1e-7c3d-9f00-1234567890ab", "https://courier.example/users/alice"
	published := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.FixedZone("CET", 3600))
	note := map[string]any{
		"id": ObjectID(base, ev), "type": "Note", "attributedTo": actor,
		"content": "<p>a & b</p>", "to": []string{Public}, "zeta": 1, "alpha": 2,
	}
	to, cc := []string{Public}, []string{actor + "/followers"}
	tests := []struct {
		name   string
		object any
	}{
		{"embedded map", note},
		{"object id", "https://remote.example/users/bob"},
		{"raw object", json.RawMessage(`{ "type": "Follow",  "id": "https://x/1" }`)},
		{"struct", struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}{"https://x/2", "Tombstone"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b1, id1, err := NewActivity(base, ev, "Create", actor, tt.object, to, cc, published)
			if err != nil {
				t.Fatal(err)
			}
			b2, id2, err := NewActivity(base+"/", ev, "Create", actor, tt.object, to, cc, published.UTC())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b1, b2) || id1 != id2 {
				t.Fatalf("not byte-for-byte identical:\n%s\n%s", b1, b2)
			}
			if id1 != ActivityID(base, ev, "Create") {
				t.Fatalf("id %q", id1)
			}
			a, err := ParseActivity(b1)
			if err != nil {
				t.Fatal(err)
			}
			if a.ID != id1 || a.Type != "Create" || a.Actor != actor || a.To[0] != Public || a.Cc[0] != cc[0] {
				t.Errorf("parsed = %+v", a)
			}
			if want := time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC); !a.Published.Equal(want) {
				t.Errorf("published %v, want %v", a.Published, want)
			}
			if !strings.HasPrefix(string(b1), `{"@context":"https://www.w3.org/ns/activitystreams","id":`) || strings.HasSuffix(string(b1), "\n") {
				t.Errorf("layout: %s", b1)
			}
			if !strings.Contains(string(b1), `"published":"2026-01-02T02:04:05Z"`) {
				t.Errorf("published format: %s", b1)
			}
			// A different event or type gives a different id.
			_, other, _ := NewActivity(base, "0190a8c2-6b1e-7c3d-9f00-1234567890ac", "Create", actor, tt.object, to, cc, published)
			_, otherType, _ := NewActivity(base, ev, "Update", actor, tt.object, to, cc, published)
			if other == id1 || otherType == id1 || other == otherType {
				t.Errorf("ids collide: %s %s %s", id1, other, otherType)
			}
		})
	}
	b, _, _ := NewActivity(base, ev, "Create", actor, note, to, cc, published)
	if !strings.Contains(string(b), `"content":"\u003cp\u003ea \u0026 b\u003c/p\u003e"`) || !strings.Contains(string(b), `"alpha":2,"attributedTo"`) {
		t.Errorf("embedded object not canonical: %s", b)
	}
	var o Outgoing
	if err := json.Unmarshal(mustRaw(t, Outgoing{Actor: actor, Activity: b}), &o); err != nil || !bytes.Equal(o.Activity, b) {
		t.Errorf("Outgoing round trip: %v", err)
	}
}

func TestNewActivityErrors(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, call := range map[string]func() error{
		"no base":    func() error { _, _, err := NewActivity("", "e", "Create", "a", "o", nil, nil, now); return err },
		"no event":   func() error { _, _, err := NewActivity("b", "", "Create", "a", "o", nil, nil, now); return err },
		"no type":    func() error { _, _, err := NewActivity("b", "e", "", "a", "o", nil, nil, now); return err },
		"no actor":   func() error { _, _, err := NewActivity("b", "e", "Create", "", "o", nil, nil, now); return err },
		"nil object": func() error { _, _, err := NewActivity("b", "e", "Create", "a", nil, nil, nil, now); return err },
		"zero time": func() error {
			_, _, err := NewActivity("b", "e", "Create", "a", "o", nil, nil, time.Time{})
			return err
		},
		"bad raw": func() error {
			_, _, err := NewActivity("b", "e", "Create", "a", json.RawMessage(`{`), nil, nil, now)
			return err
		},
		"unmarshalable": func() error {
			_, _, err := NewActivity("b", "e", "Create", "a", map[string]any{"c": make(chan int)}, nil, nil, now)
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrBuild) {
			t.Errorf("%s: got %v, want ErrBuild", name, err)
		}
	}
}

func TestMarshalTombstone(t *testing.T) {
	t.Parallel()
	b, err := MarshalTombstone("https://c.example/objects/1", "Note", time.Date(2026, 1, 1, 0, 0, 0, 5, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseObject(b)
	if err != nil || o.Type != "Tombstone" || o.ID != "https://c.example/objects/1" || !strings.Contains(string(b), `"formerType":"Note","deleted":"2026-01-01T00:00:00Z"`) {
		t.Errorf("tombstone %s: %v", b, err)
	}
	if _, err := MarshalTombstone("", "", time.Time{}); !errors.Is(err, ErrBuild) {
		t.Errorf("empty id: %v", err)
	}
}
